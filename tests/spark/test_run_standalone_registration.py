"""spark_hvd.run called the moment a session starts on a standalone cluster (issue 13): the executors have
not registered yet, and the slot check must wait for them (within start_timeout) instead of calling a
shortage; with num_proc, also after Spark's own registration window, for a worker that registers later
(issue 34). The session here does not set spark.scheduler.minRegisteredResourcesRatio, as a user's would not."""

from __future__ import annotations

import io
import os

import pytest

import spark_hvd
from rank_functions import where_am_i
from spark_hvd.launch.driver.launch_checks import describe_cluster
from standalone_cluster import StandaloneCluster, WorkerSpec

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

_WAITS_FOR_EXECUTORS = ("spark.scheduler.minRegisteredResourcesRatio",
                        "spark.scheduler.maxRegisteredResourcesWaitingTime")


def test_run_right_after_the_session_starts_waits_for_the_executors(
        spark_environment: dict[str, str], spark_sessions, tmp_path) -> None:
    conf = {k: v for k, v in spark_sessions.cluster_conf(2).items() if k not in _WAITS_FOR_EXECUTORS}
    # Spark's registration window, from the application's start: generous, as workers start only below
    # and a JVM takes seconds to start on a busy machine. Without the ratio, Spark itself does not wait.
    conf["spark.scheduler.maxRegisteredResourcesWaitingTime"] = "180s"
    with StandaloneCluster(tmp_path, [], os.environ) as cluster:
        with spark_sessions.session(cluster.master_url, conf) as spark:
            assert describe_cluster(spark).slots == 0
            # Workers come up only now, as on a cluster whose session started first.
            cluster.start_workers([WorkerSpec(), WorkerSpec()])
            results = spark_hvd.run(where_am_i, num_proc=2, spark=spark, start_timeout=240)
    assert [r["rank"] for r in results] == [0, 1]
    assert results[0]["task_address"] != results[1]["task_address"]


class _StartsAWorkerWhenTheLaunchWaits(io.StringIO):
    """The driver's stderr: the status line saying the launch waits for task slots starts the second worker,
    as a cluster still scaling up would add it (so the worker can never come before the launch looked)."""

    def __init__(self, cluster: StandaloneCluster) -> None:
        super().__init__()
        self._cluster = cluster
        self.started = False

    def write(self, text: str) -> int:
        if "task slots registered, waiting" in text and not self.started:
            self.started = True
            self._cluster.start_workers([WorkerSpec()])
        return super().write(text)


def test_num_proc_waits_for_a_worker_that_registers_after_the_session(
        spark_environment: dict[str, str], spark_sessions, tmp_path) -> None:
    conf = {k: v for k, v in spark_sessions.cluster_conf(2).items() if k not in _WAITS_FOR_EXECUTORS}
    # Spark's registration window is over at once: only start_timeout may keep the launch waiting.
    conf["spark.scheduler.maxRegisteredResourcesWaitingTime"] = "0s"
    with StandaloneCluster(tmp_path, [WorkerSpec()], os.environ) as cluster:
        with spark_sessions.session(cluster.master_url, conf) as spark:
            err = _StartsAWorkerWhenTheLaunchWaits(cluster)
            results = spark_hvd.run(where_am_i, num_proc=2, spark=spark, start_timeout=240,
                                    stdout=io.StringIO(), stderr=err)
    assert err.started, err.getvalue()
    assert "of 2 task slots registered, waiting (up to start_timeout=240s)" in err.getvalue()
    assert [r["rank"] for r in results] == [0, 1]
    assert results[0]["task_address"] != results[1]["task_address"]
