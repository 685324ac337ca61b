"""spark_hvd.run on a real standalone cluster: a master and two one-core workers on 127.0.0.1."""

from __future__ import annotations

import time

import pytest

import spark_hvd
from rank_functions import where_am_i

# The first test also pays for starting the cluster and the session (about 30 s).
pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def test_two_ranks_run_on_two_different_workers(standalone_spark) -> None:
    results = spark_hvd.run(where_am_i, num_proc=2, spark=standalone_spark)
    assert [r["rank"] for r in results] == [0, 1]
    assert [r["context_rank"] for r in results] == [0, 1]
    # Two executors: different RPC addresses, different work directories, different JVMs.
    assert results[0]["task_address"] != results[1]["task_address"]
    assert results[0]["executor_dir"] != results[1]["executor_dir"]
    assert results[0]["python_parent"] != results[1]["python_parent"]
    assert [r["sum"] for r in results] == [2.0, 2.0]


def test_num_proc_defaults_to_the_clusters_two_slots(standalone_spark) -> None:
    assert len(spark_hvd.run(where_am_i, spark=standalone_spark)) == 2


def test_more_ranks_than_slots_fails_at_once_with_the_slot_count(standalone_spark) -> None:
    start = time.monotonic()
    with pytest.raises(spark_hvd.NotEnoughSlotsError, match=r"num_proc=3 .* has 2"):
        spark_hvd.run(where_am_i, num_proc=3, spark=standalone_spark)
    assert time.monotonic() - start < 30
