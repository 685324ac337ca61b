"""Launch-to-return time of a trivial function on a warm local[2] session:
``spark_hvd.run`` against ``pyspark.ml.torch.distributor.TorchDistributor(local_mode=False)``.

    .venv/bin/python bench/spark_run.py [--blocks B] [--per-block N]

Both launch one barrier stage of two tasks. They take turns in blocks (ours, theirs, ours,
theirs...), so that the machine's slow phases hit both alike; each block starts with one untimed
launch, because a launcher's first job after the other's may pay for new Spark Python workers
(TorchDistributor's tasks do not read their input iterator, which leaves the worker unusable).
Reported: the median and the minimum per launcher over all blocks, and the ratio of the medians
(ours / TorchDistributor). Targets: ratio <= 1.0, and ours <= 3 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable

from _local_spark import local_session

TARGET_RATIO = 1.0
TARGET_OURS_S = 3.0


def trivial() -> int:
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=2, help="turns per launcher")
    parser.add_argument("--per-block", type=int, default=3, help="timed launches per turn")
    args = parser.parse_args()
    spark = local_session("bench-spark-run")
    launchers = {"spark_hvd.run": _ours(spark), "TorchDistributor": _torch_distributor(spark)}
    times: dict[str, list[float]] = {name: [] for name in launchers}
    failures: dict[str, int] = {name: 0 for name in launchers}
    for _ in range(args.blocks):
        for name, launch in launchers.items():
            for timed in [False] + [True] * args.per_block:
                start = time.perf_counter()
                try:
                    launch()
                except Exception as e:  # noqa: BLE001 - a peer's failure is reported, not fatal
                    failures[name] += 1
                    print(f"{name} failed: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
                    continue
                if timed:
                    times[name].append(time.perf_counter() - start)
    spark.stop()
    return _report(times, failures)


def _ours(spark: Any) -> Callable[[], Any]:
    import spark_hvd

    return lambda: spark_hvd.run(trivial, num_proc=2, spark=spark, verbose=0)


def _torch_distributor(spark: Any) -> Callable[[], Any]:
    from pyspark.ml.torch.distributor import TorchDistributor

    distributor = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)
    return lambda: distributor.run(trivial)


def _report(times: dict[str, list[float]], failures: dict[str, int]) -> int:
    print("| launcher | median (s) | min (s) | runs | failures |")
    print("|---|---:|---:|---:|---:|")
    for name, samples in times.items():
        median = f"{statistics.median(samples):.2f}" if samples else "-"
        best = f"{min(samples):.2f}" if samples else "-"
        print(f"| {name} | {median} | {best} | {len(samples)} | {failures[name]} |")
    ours, peer = times["spark_hvd.run"], times["TorchDistributor"]
    if not ours:
        return 1
    if peer:
        ratio = statistics.median(ours) / statistics.median(peer)
        print(f"ratio spark_hvd.run / TorchDistributor (medians): {ratio:.2f} "
              f"(target <= {TARGET_RATIO}: {'met' if ratio <= TARGET_RATIO else 'missed'})")
    median = statistics.median(ours)
    print(f"spark_hvd.run median {median:.2f} s (target <= {TARGET_OURS_S} s: "
          f"{'met' if median <= TARGET_OURS_S else 'missed'})")
    return 1 if failures["spark_hvd.run"] else 0


if __name__ == "__main__":
    sys.exit(main())
