"""spark_hvd.run_elastic benchmark:

    .venv/bin/python bench/elastic_spark.py [--part overhead|recovery|all] [--rounds 3] [--steps 60]

1. Commit overhead (local[2]): bench/_elastic_spark_fn.py's MLP (1.6M parameters) on 2 ranks, under
   spark_hvd.run without commits (the peer: no elastic at all), under run_elastic without commits, and under
   run_elastic committing every 10 steps and every step (each commit goes to the driver). Step time = rank
   0's median after warm-up; the median over --rounds interleaved rounds; ratios to the spark_hvd.run peer.
2. Recovery (a warm standalone cluster of 3 one-core workers, tests/spark/standalone_cluster.py): the job
   holds before step 20 (last commit at 20), one worker's JVM and its executor are SIGKILLed, and the time
   from the kill is split at the driver's "stage 1 ended" line (detection), its "stage 2" line (slot count),
   rank 0's start in the new stage (relaunch: tasks, processes, imports, mesh), the resumed function (the
   kept commit restored and broadcast) and its first step done.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import cloudpickle

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "spark"))

import _elastic_spark_fn  # noqa: E402
from _elastic_spark_fn import elastic_mlp  # noqa: E402
from _local_spark import local_session, prepare_environment  # noqa: E402

import spark_hvd  # noqa: E402
from spark_hvd.launch.driver.launch_checks import describe_cluster  # noqa: E402

cloudpickle.register_pickle_by_value(_elastic_spark_fn)


class StampedStream(io.TextIOBase):
    """Keeps each written line with the time it arrived, and lets the caller wait for a pattern."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self._partial = ""

    def write(self, text: str) -> int:
        with self._cond:
            self._partial += text
            *done, self._partial = self._partial.split("\n")
            now = time.time()
            self.lines.extend((now, line) for line in done)
            self._cond.notify_all()
        return len(text)

    def wait_for(self, pattern: str, count: int = 1, timeout_s: float = 300.0) -> tuple[float, re.Match[str]]:
        """(arrival time, match) of the ``count``-th line matching ``pattern``, once it has arrived."""
        regex = re.compile(pattern)
        found: list = []

        def seen() -> bool:
            found[:] = [(t, m) for t, line in self.lines if (m := regex.search(line))]
            return len(found) >= count

        with self._cond:
            if not self._cond.wait_for(seen, timeout_s):
                raise TimeoutError(f"{pattern!r} x{count} not seen: {self.lines[-20:]}")
        return found[count - 1]


def commit_overhead(args: argparse.Namespace) -> None:
    spark = local_session("elastic_spark bench")
    configs = {
        "spark_hvd.run, no commit": (spark_hvd.run, 0),
        "run_elastic, no commit": (spark_hvd.run_elastic, 0),
        "run_elastic, commit every 10": (spark_hvd.run_elastic, 10),
        "run_elastic, commit every step": (spark_hvd.run_elastic, 1),
    }
    medians: dict[str, list[float]] = {name: [] for name in configs}
    for round_number in range(args.rounds):
        for name, (launcher, every) in configs.items():
            results = launcher(elastic_mlp, args=(args.steps, 10, every), num_proc=2, spark=spark,
                               stdout=io.StringIO(), stderr=io.StringIO())
            medians[name].append(results[0]["median_s"])
            print(f"round {round_number + 1} {name}: {results[0]['median_s'] * 1e3:.2f} ms", flush=True)
    base = statistics.median(medians["spark_hvd.run, no commit"])
    print("\n| configuration | step time (ms) | ratio to spark_hvd.run |\n|---|---:|---:|")
    for name, values in medians.items():
        value = statistics.median(values)
        print(f"| {name} | {value * 1e3:.2f} | {value / base:.3f} |")
    spark.stop()


def recovery(args: argparse.Namespace) -> None:
    from pyspark.sql import SparkSession

    from standalone_cluster import StandaloneCluster, WorkerSpec

    prepare_environment()
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    phases: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as work:
        with StandaloneCluster(Path(work), [WorkerSpec(), WorkerSpec(), WorkerSpec()], os.environ) as cluster:
            spark = (SparkSession.builder.master(cluster.master_url).appName("elastic_spark recovery")
                     .config("spark.executor.cores", "1").config("spark.executor.memory", "512m")
                     .config("spark.cores.max", "3").config("spark.ui.enabled", "false")
                     .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
                     .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "60s").getOrCreate())
            # Warm: the executors' Python workers have run a job (as on a cluster already in use).
            spark_hvd.run(elastic_mlp, args=(2, 0, 0), num_proc=3, spark=spark, stdout=io.StringIO())
            for attempt in range(args.recoveries):
                gate = os.path.join(work, f"gate{attempt}")
                out, err = StampedStream(), StampedStream()
                done: dict = {}

                def job() -> None:
                    try:
                        done["results"] = spark_hvd.run_elastic(
                            elastic_mlp, args=(30, 0, 10, 20, gate), num_proc=3, min_num_proc=2, max_num_proc=3,
                            elastic_timeout=60, stdout=out, stderr=err, spark=spark)
                    except BaseException as error:  # noqa: BLE001
                        done["error"] = error

                thread = threading.Thread(target=job, daemon=True)
                thread.start()
                out.wait_for(r"@@held")
                killed_at = time.time()
                cluster.kill_worker(2)
                open(gate, "w").close()
                detected, _ = err.wait_for(r"elastic stage 1 ended")
                relaunched, _ = err.wait_for(r"elastic stage 2:")
                started = float(out.wait_for(r"@@started (\S+) size=2")[1].group(1))
                resumed = float(out.wait_for(r"@@resumed (\S+) step=20 size=2")[1].group(1))
                first = float(out.wait_for(r"@@first-step (\S+)", count=2)[1].group(1))
                thread.join(300)
                if "error" in done:
                    raise done["error"]
                phase = {"detection": detected - killed_at, "slot count": relaunched - detected,
                         "relaunch (tasks, processes, imports, mesh)": started - relaunched,
                         "model built, commit restored and broadcast": resumed - started, "first step": first - resumed}
                phase["kill -> training again"] = first - killed_at
                phases.append(phase)
                print(f"recovery {attempt + 1}: " + ", ".join(f"{k} {v:.2f}s" for k, v in phase.items()), flush=True)
                cluster.restart_worker(2)
                while describe_cluster(spark).slots != 3:
                    time.sleep(0.25)  # polls the slot count until the restarted worker's executor registered
            spark.stop()
    print("\n| phase | median s |\n|---|---:|")
    for key in phases[0]:
        values = [p[key] for p in phases]
        print(f"| {key} | {statistics.median(values):.2f} ({min(values):.2f} to {max(values):.2f}) |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=["overhead", "recovery", "all"], default="all")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--recoveries", type=int, default=2)
    args = parser.parse_args()
    if args.part in ("overhead", "all"):
        commit_overhead(args)
    if args.part in ("recovery", "all"):
        recovery(args)


if __name__ == "__main__":
    main()
