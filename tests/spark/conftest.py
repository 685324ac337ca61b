"""Spark fixtures: a local[2] session, and a real standalone cluster (plain, or with fake GPUs).

Sessions are expensive (about 9-18 s) and a process holds one SparkContext at a time, so each test
module uses exactly one session fixture. The local[2] session is kept from module to module
(kept_session.py); the standalone ones are module-scoped, and building one stops the kept session.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

pytest.importorskip("pyspark")

from by_value import pickled_by_value  # noqa: E402
import estimator_models  # noqa: E402
import kept_session  # noqa: E402
import rank_functions  # noqa: E402  (tests/spark is on sys.path, like tests/ for jobs.py)
from spark_conf import COMMON_CONF  # noqa: E402
from standalone_cluster import StandaloneCluster, WorkerSpec  # noqa: E402


def _java_home() -> str:
    current = os.environ.get("JAVA_HOME")
    if current and Path(current, "bin", "java").exists():
        return current
    for candidate in sorted(Path("/usr/lib/jvm").glob("*17*")):
        if (candidate / "bin" / "java").exists():
            return str(candidate)
    pytest.fail("Spark tests need Java 17: install openjdk-17 or set JAVA_HOME")


@pytest.fixture(scope="session")
def spark_environment() -> Iterator[dict[str, str]]:
    """The variables Spark needs on this machine, for the driver JVM and for cluster daemons."""
    env = {
        "JAVA_HOME": _java_home(),
        "PYSPARK_PYTHON": sys.executable,          # else workers run the system python
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",             # else tasks advertise a non-loopback address
    }
    # Functions in these modules are pickled by value, so ranks need not import the tests.
    with pickled_by_value(rank_functions, estimator_models), pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        yield env


@contextlib.contextmanager
def _session(master: str, conf: dict[str, str]) -> Iterator[Any]:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    # getOrCreate would hand back the kept local[2] session, whatever this one asks for.
    kept_session.release()
    settings = {**COMMON_CONF, **conf}
    builder = SparkSession.builder.master(master).appName("spark_hvd-tests")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        yield spark
    finally:
        spark.stop()
        # The builder leaves its settings behind as JVM system properties, which the next
        # session in this process would inherit (a local[2] session asking for GPUs hangs).
        system = SparkContext._jvm.java.lang.System
        for key in (*settings, "spark.master", "spark.app.name"):
            system.clearProperty(key)


@pytest.fixture(scope="module")
def local_spark(spark_environment: dict[str, str]) -> Any:
    return kept_session.local(lambda: _session("local[2]", {}))


def _cluster_conf(cores: int) -> dict[str, str]:
    return {
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.cores.max": str(cores),
        # Without these, the first barrier stage can find 0 slots while executors register.
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
    }


@pytest.fixture(scope="session")
def spark_sessions() -> Any:
    """For a module whose session needs settings of its own: ``session(master, conf)`` (a context manager)
    and ``cluster_conf(cores)``, as the fixtures here use them."""
    return SimpleNamespace(session=_session, cluster_conf=_cluster_conf)


@pytest.fixture(scope="module")
def standalone_spark(spark_environment: dict[str, str],
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A session on a real master with two one-core workers on 127.0.0.1."""
    workers = [WorkerSpec(), WorkerSpec()]
    with StandaloneCluster(tmp_path_factory.mktemp("standalone"), workers, os.environ) as cluster:
        with _session(cluster.master_url, _cluster_conf(len(workers))) as spark:
            yield spark


@pytest.fixture(scope="module")
def three_worker_cluster(spark_environment: dict[str, str],
                         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A session on a real master with three one-core workers, and the cluster itself (to kill and restart
    a worker: ``cluster.kill_worker(i)``, ``cluster.restart_worker(i)``) as ``.cluster`` and ``.spark``."""
    workers = [WorkerSpec(), WorkerSpec(), WorkerSpec()]
    with StandaloneCluster(tmp_path_factory.mktemp("three-workers"), workers, os.environ) as cluster:
        with _session(cluster.master_url, _cluster_conf(len(workers))) as spark:
            yield SimpleNamespace(cluster=cluster, spark=spark)


@pytest.fixture(scope="module")
def elastic_functions_by_value() -> Iterator[None]:
    """Ships tests/spark/elastic_functions.py and the modules it uses to the ranks by value."""
    import elastic_functions

    with pickled_by_value(elastic_functions, sys.modules["elastic_data"], sys.modules["torch_elastic_model"]):
        yield


# Worker 1 pretends its executors are already restricted to two devices, so Spark's address
# "1" must become physical device 6 in the rank's CUDA_VISIBLE_DEVICES.
FAKE_GPU_WORKERS = [
    WorkerSpec(gpu_addresses=["0"]),
    WorkerSpec(gpu_addresses=["1"], env={"CUDA_VISIBLE_DEVICES": "4,6"}),
]


@pytest.fixture(scope="module")
def gpu_spark(spark_environment: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Like standalone_spark, but each worker advertises one fake GPU and each task takes one."""
    with StandaloneCluster(tmp_path_factory.mktemp("gpu"), FAKE_GPU_WORKERS, os.environ) as cluster:
        with _session(cluster.master_url, {
            **_cluster_conf(len(FAKE_GPU_WORKERS)),
            "spark.executor.resource.gpu.amount": "1",
            "spark.task.resource.gpu.amount": "1",
        }) as spark:
            yield spark
