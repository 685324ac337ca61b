"""spark_hvd.run called the moment a session starts on a standalone cluster (issue 13): the executors have
not registered yet, and the slot check must wait for them (within start_timeout) instead of calling a
shortage. The session here does not set spark.scheduler.minRegisteredResourcesRatio, as a user's would not."""

from __future__ import annotations

import os

import pytest

import spark_hvd
from rank_functions import where_am_i
from spark_hvd.launch.launch_checks import describe_cluster
from standalone_cluster import StandaloneCluster, WorkerSpec

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

_WAITS_FOR_EXECUTORS = ("spark.scheduler.minRegisteredResourcesRatio",
                        "spark.scheduler.maxRegisteredResourcesWaitingTime")


def test_run_right_after_the_session_starts_waits_for_the_executors(
        spark_environment: dict[str, str], spark_sessions, tmp_path) -> None:
    conf = {k: v for k, v in spark_sessions.cluster_conf(2).items() if k not in _WAITS_FOR_EXECUTORS}
    with StandaloneCluster(tmp_path, [WorkerSpec(), WorkerSpec()], os.environ) as cluster:
        with spark_sessions.session(cluster.master_url, conf) as spark:
            # The race this test needs: an executor JVM takes seconds to start and register.
            assert describe_cluster(spark).slots < 2, "the executors registered before the first check"
            results = spark_hvd.run(where_am_i, num_proc=2, spark=spark, start_timeout=120)
    assert [r["rank"] for r in results] == [0, 1]
    assert results[0]["task_address"] != results[1]["task_address"]
