"""What an idle engine costs: the engine thread's CPU while the ranks compute without collectives, and
how long the first allreduce after such a spell takes, against another build in the same run.

    .venv/bin/python bench/engine_idle.py [--ranks 2] [--idle-s 3] [--rounds 3] [--baseline PYTHON]

Each rank starts the engine, then alternates: compute (numpy matrix products) for --idle-s seconds with
no collective, then one small allreduce, timed. The CPU time of the process's threads other than the
main one (the engine's) over the idle spells is reported per second of idle, as is the median latency of
the allreduce that ends each spell. --baseline PYTHON runs the same on an interpreter that imports another
build (bench/_baseline.py), interleaved round by round, and prints ours / base.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _baseline import SAFE_PATH, checked_baseline
from _thread_cpu import thread_cpu_s

MARKER = "@@engine_idle "
SPELLS = 4


def background_cpu_s() -> float:
    """CPU seconds so far of every thread but the main one: the engine's (with OMP_NUM_THREADS=1 numpy
    starts none of its own), found this way in builds that do not name it too."""
    return sum(seconds for name, seconds in thread_cpu_s().items() if name != "main")


def rank_main(idle_s: float) -> None:
    import numpy as np

    import collective as hvd
    from collective._native import CollectiveKind
    from collective.runtime import start_engine
    hvd.init()
    engine = start_engine()
    a = np.random.default_rng(hvd.rank()).random((200, 200))
    x = np.ones(16, np.float32)
    engine.wait(engine.submit(CollectiveKind.ALLREDUCE, "warm", x))
    cpu, latencies = 0.0, []
    for spell in range(SPELLS):
        before = background_cpu_s()
        end = time.monotonic() + idle_s
        while time.monotonic() < end:
            a @ a
        cpu += background_cpu_s() - before
        start = time.perf_counter()
        engine.wait(engine.submit(CollectiveKind.ALLREDUCE, f"after.{spell}", x))
        latencies.append(time.perf_counter() - start)
    print(MARKER + json.dumps({"cpu_ms_per_s": cpu / (SPELLS * idle_s) * 1e3,
                               "latency_us": statistics.median(latencies) * 1e6}), flush=True)
    hvd.shutdown()


def one_run(python: str, extra: list[str], args: argparse.Namespace) -> dict[str, float]:
    cmd = [python, *extra, "-m", "collective.run", "-np", str(args.ranks), "--timeout", "300",
           str(Path(__file__).resolve()), "--role", "rank", "--idle-s", str(args.idle_s)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    if out.returncode != 0:
        raise RuntimeError(f"{python} failed:\n{(out.stdout + out.stderr)[-3000:]}")
    records = [json.loads(line.split(MARKER, 1)[1]) for line in out.stdout.splitlines() if MARKER in line]
    if len(records) != args.ranks:
        raise RuntimeError(f"{len(records)} of {args.ranks} ranks reported:\n{out.stdout[-3000:]}")
    return {"cpu_ms_per_s": max(r["cpu_ms_per_s"] for r in records),
            "latency_us": max(r["latency_us"] for r in records)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--role", choices=["rank"], default=None)
    args = parser.parse_args()
    if args.role == "rank":
        rank_main(args.idle_s)
        return
    builds = {"ours": (sys.executable, [])}
    if args.baseline is not None:
        print(f"baseline: {checked_baseline(args.baseline)}", flush=True)
        builds["base"] = (str(args.baseline), list(SAFE_PATH))
    results: dict[str, list[dict[str, float]]] = {name: [] for name in builds}
    for round_index in range(args.rounds):
        for name, (python, extra) in builds.items():
            results[name].append(one_run(python, extra, args))
        print(f"round {round_index + 1}: " + ", ".join(
            f"{n} {r[-1]['cpu_ms_per_s']:.1f} ms CPU/s, {r[-1]['latency_us']:.0f} us" for n, r in results.items()),
            flush=True)
    print(f"\n{args.ranks} ranks, {SPELLS} idle spells of {args.idle_s:g} s each, medians of {args.rounds} rounds "
          "(max over ranks):")
    print("| build | engine CPU while idle (ms per s) | first allreduce after a spell (us) |")
    print("|---|---:|---:|")
    medians = {name: {key: statistics.median(r[key] for r in runs) for key in ("cpu_ms_per_s", "latency_us")}
               for name, runs in results.items()}
    for name, m in medians.items():
        print(f"| {name} | {m['cpu_ms_per_s']:.2f} | {m['latency_us']:.0f} |")
    if "base" in medians:
        ours, base = medians["ours"], medians["base"]
        print(f"\nours / base: idle CPU {ours['cpu_ms_per_s'] / max(base['cpu_ms_per_s'], 1e-9):.2f}, "
              f"latency {ours['latency_us'] / max(base['latency_us'], 1e-9):.2f}")


if __name__ == "__main__":
    main()
