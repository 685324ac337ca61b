"""Measurements that calibrate and check the schedule simulator (bench/simulate.py, bench/simulator/).

    python bench/sim_calibrate.py [--ranks 2 4 8 ...] [--transports shm tcp] [--sizes 256 4096 ...]
                                  [--out bench/results/sim-calibration.json]

For each transport and world size it launches bench/_sim_calibrate_worker.py with collective.run and keeps
rank 0's line: mesh formation time and the slowest rank's median allreduce time per size. The JSON it writes
is what ``bench/simulate.py check --measured FILE`` compares the simulator against.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
WORKER = BENCH_DIR / "_sim_calibrate_worker.py"
MARKER = "@@simcal "


def run_one(ranks: int, transport: str, sizes: list[int], timeout_s: float) -> dict | None:
    argv = [sys.executable, "-m", "collective.run", "-np", str(ranks), "--timeout", str(int(timeout_s)),
            str(WORKER), "--transport", transport, "--sizes", *map(str, sizes), "--budget-s", "0.5"]
    load = os.getloadavg()[0]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 30)
    except subprocess.TimeoutExpired:
        print(f"{transport} p={ranks}: timed out", file=sys.stderr)
        return None
    for line in done.stdout.splitlines():
        if MARKER in line:
            row = json.loads(line.split(MARKER, 1)[1])
            row["loadavg_before"] = load
            return row
    print(f"{transport} p={ranks}: no result (rc {done.returncode})\n{done.stderr[-2000:]}", file=sys.stderr)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64, 128])
    parser.add_argument("--transports", nargs="+", choices=("shm", "tcp"), default=["shm", "tcp"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 4096, 65536, 1 << 20, 8 << 20])
    parser.add_argument("--timeout", type=float, default=400.0)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "sim-calibration.json")
    args = parser.parse_args()
    rows = []
    for ranks in args.ranks:
        for transport in args.transports:
            t0 = time.monotonic()
            row = run_one(ranks, transport, args.sizes, args.timeout)
            if row is not None:
                rows.append(row)
                print(json.dumps(row), f"({time.monotonic() - t0:.0f} s)", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"cores": os.cpu_count(), "rows": rows}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
