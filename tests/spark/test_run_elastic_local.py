"""spark_hvd.run_elastic on a local[2] session: a rank killed mid-run is replaced by a new stage that resumes
from the last commit; reset_limit and bad bounds fail by name (fn's own exceptions: test_run_elastic_retries.py)."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

import spark_hvd
from spark_hvd.errors import CommitTooLargeError
from elastic_functions import assert_reference_weights, torch_elastic_train

pytestmark = [pytest.mark.usefixtures("elastic_functions_by_value"), pytest.mark.spark, pytest.mark.timeout(180)]


def test_a_killed_rank_relaunches_the_stage_from_the_last_commit(local_spark, tmp_path) -> None:
    out, err = io.StringIO(), io.StringIO()
    results = spark_hvd.run_elastic(torch_elastic_train, args=(9, 3, str(tmp_path)),
                                    kwargs={"victim_rank": 1, "victim_step": 5}, num_proc=2, min_num_proc=1,
                                    elastic_timeout=60, stdout=out, stderr=err, spark=local_spark)
    assert [r["rank"] for r in results] == [0, 1]
    # Step 5 died with rank 1 and step 4 was never committed: the new stage redoes them from step 3.
    assert "[0]<stdout>:RESUMED step=0 size=2" in out.getvalue()
    assert "[0]<stdout>:RESUMED step=3 size=2" in out.getvalue(), out.getvalue()
    history = err.getvalue()
    assert re.search(r"elastic stage 1 ended: lost rank 1 \(.*SIGKILL", history), history
    assert "elastic stage 2: 2 rank(s), starting from the commit #1 of stage 1" in history, history
    for result in results:
        assert result["sizes"] == [2] * 9
        assert_reference_weights(result)


def test_reset_limit_zero_fails_at_the_first_lost_rank(local_spark, tmp_path) -> None:
    with pytest.raises(spark_hvd.ResetLimitError, match=r"reset_limit=0.*lost rank 0"):
        spark_hvd.run_elastic(torch_elastic_train, args=(9, 3, str(tmp_path)),
                              kwargs={"victim_rank": 0, "victim_step": 4}, num_proc=2, reset_limit=0,
                              stdout=io.StringIO(), stderr=io.StringIO(), spark=local_spark)


def test_bounds_are_checked_before_anything_launches(local_spark) -> None:
    with pytest.raises(ValueError, match=r"min_num_proc <= num_proc <= max_num_proc, got 3 <= 2 <= 2"):
        spark_hvd.run_elastic(torch_elastic_train, num_proc=2, min_num_proc=3, spark=local_spark)
    with pytest.raises(ValueError, match="min_np=1 and min_num_proc=2 disagree"):
        spark_hvd.run_elastic(torch_elastic_train, num_proc=2, min_np=1, min_num_proc=2, spark=local_spark)
    with pytest.raises(ValueError, match="reset_limit must be"):
        spark_hvd.run_elastic(torch_elastic_train, num_proc=2, reset_limit=-1, spark=local_spark)
    with pytest.raises(TypeError, match="commit_store must be a spark_hvd Store, a path or URL, or None; got 3"):
        spark_hvd.run_elastic(torch_elastic_train, num_proc=2, commit_store=3, spark=local_spark)
    with pytest.raises(ValueError, match="elastic_timeout must be a positive number of seconds, got inf"):
        spark_hvd.run_elastic(torch_elastic_train, num_proc=2, elastic_timeout=float("inf"), spark=local_spark)


def test_without_a_session_the_bounds_come_first_then_the_missing_session_is_named() -> None:
    # A fresh interpreter: this one's tests have a session that SparkSession.active() would find.
    script = (
        "import spark_hvd\n"
        "for kwargs in ({'min_num_proc': 3, 'max_num_proc': 2}, {'num_proc': 2}):\n"
        "    try:\n"
        "        spark_hvd.run_elastic(print, **kwargs)\n"
        "    except Exception as e:\n"
        "        print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.splitlines() == [
        "ValueError spark_hvd.run_elastic needs min_num_proc <= num_proc <= max_num_proc, got 3 <= num_proc <= 2",
        "LaunchError spark_hvd.run_elastic needs a SparkSession: create one, or pass spark=...",
    ], out.stdout + out.stderr


def test_commits_over_the_memory_limit_go_through_the_store_and_are_deleted_at_the_end(local_spark, tmp_path):
    store_dir = tmp_path / "store"
    out, err = io.StringIO(), io.StringIO()
    # max_commit_bytes=1: every commit is written to the Store; the driver only holds references.
    results = spark_hvd.run_elastic(torch_elastic_train, args=(9, 3, str(tmp_path)),
                                    kwargs={"victim_rank": 1, "victim_step": 5}, num_proc=2, min_num_proc=1,
                                    elastic_timeout=60, max_commit_bytes=1, commit_store=str(store_dir),
                                    stdout=out, stderr=err, spark=local_spark)
    assert "[0]<stdout>:RESUMED step=3 size=2" in out.getvalue(), out.getvalue()
    assert "elastic stage 2: 2 rank(s), starting from the commit #1 of stage 1 (kept in commit_store)" in \
        err.getvalue(), err.getvalue()
    for result in results:
        assert_reference_weights(result)
    assert list((store_dir / "runs").iterdir()) == [], "the run's stored commits were left behind"


def test_a_commit_over_the_limit_without_a_store_names_commit_store(local_spark, tmp_path) -> None:
    with pytest.raises(CommitTooLargeError, match=r"over max_commit_bytes=1 .*pass commit_store=") as raised:
        spark_hvd.run_elastic(torch_elastic_train, args=(6, 3, str(tmp_path)), num_proc=2, max_commit_bytes=1,
                              stdout=io.StringIO(), stderr=io.StringIO(), spark=local_spark)
    # Not retried: the next stage would commit the same state.
    assert "not retried: its class says a retry cannot help" in "\n".join(raised.value.__notes__)


def test_a_spark_connect_session_is_refused_with_the_reason() -> None:
    # A Connect client cannot be dialled by the executors, so commits could not reach it while a stage runs.
    connect_session = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})()
    with pytest.raises(spark_hvd.ElasticNotSupportedError, match="cannot dial a Spark Connect client"):
        spark_hvd.run_elastic(torch_elastic_train, num_proc=2, spark=connect_session)


def test_too_few_slots_for_longer_than_the_elastic_timeout_names_the_shortage(local_spark) -> None:
    with pytest.raises(spark_hvd.ElasticTimeoutError, match=r"2 task slot\(s\), fewer than min_num_proc=3, "
                                                           r"for longer than elastic_timeout=1s"):
        spark_hvd.run_elastic(torch_elastic_train, num_proc=3, min_num_proc=3, elastic_timeout=1, spark=local_spark)
