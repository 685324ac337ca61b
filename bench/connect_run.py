"""What Spark Connect costs spark_hvd.run: launch-to-return of the same trivial function on one local[2]
Spark driver, reached through a classic session and through a Spark Connect session, in one process.

    .venv/bin/python bench/connect_run.py [--blocks B] [--per-block N]

``SparkSession.builder.remote("local[2]")`` starts the Spark driver in this process's JVM with a Connect
server in it; the classic session on that same driver is the peer, so both paths run on the same
executors and Python workers. The sessions take turns in blocks (one untimed run each first), so the
machine's slow phases hit both alike. Under Connect the run also pays the slot count (one tiny query)
and returns the ranks' output in the stage's rows instead of streaming it. Also timed alone: that slot
count (``describe_cluster``) under Connect. Reported: medians, minima, and the ratio Connect / classic.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import time
from typing import Any, Callable, Iterator

import _local_spark


_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


def trivial() -> int:
    return 1


def _sessions() -> tuple[Any, Any]:
    from pyspark.sql import SparkSession
    from pyspark.sql.session import SparkSession as ClassicSession

    _local_spark.prepare_environment()
    connect = (SparkSession.builder.remote("local[2]")
               .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "1")
               .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s").getOrCreate())
    classic = ClassicSession._activeSession   # the driver remote("local[2]") started, as a classic session
    assert classic is not None and type(classic) is not type(connect)
    return classic, connect


@contextlib.contextmanager
def _api_mode(name: str) -> Iterator[None]:
    """pyspark picks classic or Connect code for functions and UDFs by one process-wide variable, which
    remote() sets: clear it while the classic session runs."""
    saved = os.environ.pop(_CONNECT_MODE, None) if name == "classic" else None
    try:
        yield
    finally:
        if saved is not None:
            os.environ[_CONNECT_MODE] = saved


def _timed(fn: Callable[[], Any]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--per-block", type=int, default=3)
    args = parser.parse_args()

    import spark_hvd
    from spark_hvd.launch.driver.launch_checks import describe_cluster

    classic, connect = _sessions()
    runs = {"classic": [], "connect": []}
    for _ in range(args.blocks):
        for name, spark in (("classic", classic), ("connect", connect)):
            def launch(spark: Any = spark) -> None:
                assert spark_hvd.run(trivial, num_proc=2, spark=spark, stdout=io.StringIO()) == [1, 1]
            with _api_mode(name):
                launch()   # untimed: a session's first job after the other's may start new Python workers
                runs[name] += [_timed(launch) for _ in range(args.per_block)]
    probes = [_timed(lambda: describe_cluster(connect)) for _ in range(5)]

    print(f"spark_hvd.run(trivial, num_proc=2) on local[2], {args.blocks} blocks x {args.per_block} runs per session")
    for name, times in runs.items():
        print(f"  {name:8s} median {statistics.median(times):6.3f} s   min {min(times):6.3f} s")
    ratio = statistics.median(runs["connect"]) / statistics.median(runs["classic"])
    print(f"  ratio connect / classic (medians): {ratio:.2f}")
    print(f"  Connect slot count (describe_cluster): median {statistics.median(probes):.3f} s, "
          f"min {min(probes):.3f} s")
    connect.stop()


if __name__ == "__main__":
    main()
