"""How long a job takes to form, and what each rank holds afterwards: ours against gloo, in the same run.

    python bench/formation.py [--sizes 8 16 32 64] [--sides ours gloo] [--repeats 1] [--large-mib 4]

For each world size, each side starts that many ranks on this host (ours under ``python -m collective.run``,
gloo as ``torch.distributed.init_process_group("gloo")`` under torchrun), alternating sides each repeat.
Formation is the same for both: from the last rank entering init to the last rank leaving it (each rank reads
the clock right before and after its init; rank 0 gathers them in one allgather afterwards). Also reported,
per rank (mean, and max): socket descriptors, resident memory and shared memory mapped, after formation and
after one small (1 KiB) and one large (--large-mib) allreduce; and for ours, the peers connected after init
(pairs connect on first use). Medians over the repeats; ratios ours / gloo.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).resolve().parent / "_formation_worker.py"
MARKER = "@@formation "


def launch(side: str, size: int, large: int, timeout_s: float) -> dict | None:
    if side == "ours":
        cmd = [sys.executable, "-m", "collective.run", "-np", str(size), "--timeout", str(int(timeout_s)),
               str(WORKER), side, str(large)]
    else:
        port = random.randint(20000, 40000)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(size),
               "--master_addr", "127.0.0.1", "--master_port", str(port), str(WORKER), side, str(large)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s + 30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        print(f"  {side} at {size} ranks timed out", file=sys.stderr)
        return None
    for line in out.splitlines():
        if MARKER in line:
            return json.loads(line.split(MARKER, 1)[1])
    print(f"  {side} at {size} ranks failed (exit {proc.returncode}):\n{out[-2000:]}", file=sys.stderr)
    return None


def median_record(records: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in records) if isinstance(records[0][k], (int, float)) else records[0][k]
            for k in records[0]}


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--sides", nargs="+", default=["ours", "gloo"], choices=["ours", "gloo"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--large-mib", type=float, default=4.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    large = int(args.large_mib * (1 << 20)) // 4
    results: dict[tuple[str, int], dict] = {}
    for size in args.sizes:
        runs: dict[str, list[dict]] = {side: [] for side in args.sides}
        for repeat in range(args.repeats):
            order = args.sides if repeat % 2 == 0 else list(reversed(args.sides))
            for side in order:
                record = launch(side, size, large, args.timeout)
                if record is not None:
                    assert record["ok"], record
                    runs[side].append(record)
                    print(f"  {side:4s} p={size:4d} formation {record['formation_s']:.3f} s", flush=True)
        for side, records in runs.items():
            if records:
                results[(side, size)] = median_record(records)
    print("\n| p | side | formation s | ratio ours/gloo | last rank at the rendezvous server / its mesh begun / done, "
          "s after the last entered init; longest mesh s | first small allreduce s (max) | peers connected after init "
          "(mean) | sockets formed / small / large (mean; max) | RSS MiB formed / large (mean) | "
          "shm mapped MiB formed / small / large (mean) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for size in args.sizes:
        gloo = results.get(("gloo", size))
        for side in args.sides:
            r = results.get((side, size))
            if r is None:
                continue
            ratio = fmt(r["formation_s"] / gloo["formation_s"], 2) if side == "ours" and gloo else ""
            connected = fmt(r["connected_mean"], 1) if side == "ours" else "-"
            sockets = (f"{r['formed_sockets_mean']:.1f} / {r['small_sockets_mean']:.1f} / {r['large_sockets_mean']:.1f}"
                       f"; {r['large_sockets_max']:.0f}")
            split = (f"{r['reached_server_s']:.3f} / {r['mesh_begun_s']:.3f} / {r['mesh_done_s']:.3f}; "
                     f"{r['mesh_s_max']:.3f}" if side == "ours" else "-")
            first = fmt(r["first_small_allreduce_s_max"])
            print(f"| {size} | {side} | {fmt(r['formation_s'])} | {ratio} | {split} | {first} | {connected} | "
                  f"{sockets} | "
                  f"{r['formed_rss_mib_mean']:.0f} / {r['large_rss_mib_mean']:.0f} | "
                  f"{r['formed_shm_mib_mean']:.0f} / {r['small_shm_mib_mean']:.0f} / {r['large_shm_mib_mean']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
