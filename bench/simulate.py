"""Predict spark-hvd's collectives at world sizes this machine cannot run (an alpha-beta schedule simulator).

    python bench/simulate.py check --measured bench/results/sim-calibration.json [--fit-ranks 2 4 8]
                                   [--multihost bench/results/multihost-*.json] [--repeat SECOND.json]
    python bench/simulate.py scale [--ranks 256 512 ...] [--gbit 100 1] [--sizes 1M 64M]
    python bench/simulate.py small [--ranks ...] [--gbit 100]
    python bench/simulate.py efficiency [--ranks ...] [--gbit 100 1]
    python bench/simulate.py all --measured FILE      # every table, as Markdown

``check`` fits this machine's CPU prices at a few world sizes (bench/sim_calibrate.py measures them) and
prints every measured point beside its prediction. The others price the schedules on GPU clusters (8 GPUs per
host, NCCL within a host, our TCP across); their assumptions are in docs/how-it-works.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from simulator import report  # noqa: E402

SCALE_RANKS = [256, 512, 1024, 2048, 4096]


def parse_size(text: str) -> float:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return float(text[:-1]) * units[text[-1]] if text[-1:] in units else float(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("check", "scale", "small", "efficiency", "all"))
    parser.add_argument("--measured", type=Path, default=None, help="bench/sim_calibrate.py's JSON")
    parser.add_argument("--multihost", type=Path, default=None, help="bench/multihost.py's JSON (emulated hosts)")
    parser.add_argument("--repeat", type=Path, default=None, help="a second sim_calibrate JSON: run-to-run spread")
    parser.add_argument("--fit-ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--ranks", type=int, nargs="+", default=SCALE_RANKS)
    parser.add_argument("--gbit", type=float, nargs="+", default=[100.0, 1.0])
    parser.add_argument("--sizes", type=parse_size, nargs="+", default=[4096.0, 1 << 20, 64 << 20])
    args = parser.parse_args(argv)
    if args.what in ("check", "all") and args.measured is None:
        parser.error(f"{args.what} needs --measured FILE (bench/sim_calibrate.py writes one)")
    parts = []
    if args.what in ("check", "all"):
        parts += ["### Measured against predicted, this machine\n", report.check(args.measured, tuple(args.fit_ranks)),
                  report.error_summary(args.measured, tuple(args.fit_ranks))]
        if args.repeat is not None:
            parts += ["### The same points measured again (second run / first run)\n",
                      report.spread(args.measured, args.repeat)]
        if args.multihost is not None:
            parts += ["### Measured against predicted, emulated hosts\n",
                      report.check_emulated(args.measured, args.multihost, tuple(args.fit_ranks))]
    if args.what in ("scale", "all"):
        parts += ["### Allreduce at scale\n", report.scale(args.ranks, args.gbit, args.sizes)]
    if args.what in ("small", "all"):
        parts += ["### Small messages and mesh formation\n"] + [report.small_and_mesh(args.ranks, g) for g in args.gbit]
    if args.what in ("efficiency", "all"):
        parts += ["### Scaling efficiency\n", report.horovod_and_scale(args.ranks, args.gbit)]
    print("\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
