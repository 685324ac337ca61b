"""``spark_hvd.run``'s launch-to-return, this build against another one, in alternating blocks.

    .venv/bin/python bench/launch_baseline.py --baseline PYTHON [--blocks 3] [--launches 5]

PYTHON imports the other build (see bench/_baseline.py). Each block is a process of its own on one
interpreter: it starts a warm local[2] session (its Spark Python workers run the same interpreter), makes
one untimed launch, then ``--launches`` timed ones of a trivial function on two ranks. Blocks alternate
(this build, the baseline, this build...), so that the machine's slow phases hit both alike. Reported:
each build's median and minimum over all its timed launches, and after / before (1.0 = no change).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _baseline import SUFFIX, checked_baseline

MARKER = "@@launch "


def trivial() -> int:
    return 1


def block(launches: int) -> None:
    import spark_hvd
    from _local_spark import local_session

    spark = local_session("launch-baseline")
    spark_hvd.run(trivial, num_proc=2, spark=spark, verbose=0)  # new Python workers, first job's costs
    times = []
    for _ in range(launches):
        began = time.perf_counter()
        spark_hvd.run(trivial, num_proc=2, spark=spark, verbose=0)
        times.append(time.perf_counter() - began)
    print(MARKER + json.dumps(times), flush=True)
    spark.stop()


def run_block(python: str, launches: int) -> list[float]:
    # From a neutral directory: Spark's Python workers and the rank children start with ``python -m``, which
    # would put a checkout's working directory, and its collective, ahead of the interpreter's own build.
    done = subprocess.run([python, str(Path(__file__).resolve()), "--role-block", str(launches)],
                          capture_output=True, text=True, timeout=600, cwd=tempfile.gettempdir())
    found = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{python}: block failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return json.loads(found[0][len(MARKER):])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="an interpreter that imports the other build")
    parser.add_argument("--blocks", type=int, default=3, help="blocks per build")
    parser.add_argument("--launches", type=int, default=5, help="timed launches per block")
    parser.add_argument("--role-block", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role_block is not None:
        block(args.role_block)
        return 0
    if args.baseline is None:
        parser.error("--baseline is required")
    try:
        print(f"baseline: {checked_baseline(args.baseline)}", flush=True)
    except ValueError as e:
        parser.error(str(e))
    builds = {"this build": sys.executable, f"baseline ({SUFFIX})": str(args.baseline)}
    samples: dict[str, list[float]] = {name: [] for name in builds}
    for number in range(1, args.blocks + 1):
        for name, python in builds.items():
            times = run_block(python, args.launches)
            samples[name] += times
            print(f"block {number}, {name}: " + ", ".join(f"{t:.2f}" for t in times) + " s", flush=True)
    print("\n| build | launch-to-return median (min), s |\n|---|---:|")
    for name, times in samples.items():
        print(f"| {name} | {statistics.median(times):.2f} ({min(times):.2f}) |")
    after, before = (statistics.median(times) for times in samples.values())
    print(f"\nafter / before: {after / before:.3f} (1.0 = no change)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
