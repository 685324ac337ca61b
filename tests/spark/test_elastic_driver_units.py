"""run_elastic's driver loop without Spark: the stages' endings are faked (run_ranks and the slot count are
replaced), to check what is retried, what is not, and what the history says."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from collective.launcher import LineSink
from spark_hvd.errors import RankFailure, ResetLimitError, RunError, SparkJobError
from spark_hvd.launch.driver import elastic_runner, run_options
from spark_hvd.launch.driver.elastic_runner import _Bounds, _ElasticDriver
from spark_hvd.launch.driver.output_collector import RankCommitted
from spark_hvd.launch.driver.run_options import RunOptions


def driver(monkeypatch: pytest.MonkeyPatch, endings: list, reset_limit: int | None = None,
           ) -> tuple[_ElasticDriver, io.BytesIO]:
    """A driver whose stages end, in turn, as ``endings`` say: an exception to raise, a (rank 0) commit
    blob to keep before raising the next item, or a list of results to return."""
    err = io.BytesIO()
    stages = iter(endings)

    def fake_run_ranks(launch, make_job):
        for ending in stages:
            if isinstance(ending, bytes):
                launch.keep_commit(RankCommitted(0, 1, ending))
            elif isinstance(ending, BaseException):
                raise ending
            else:
                return ending
        raise AssertionError("more stages than the test planned")

    monkeypatch.setattr(elastic_runner, "run_ranks", fake_run_ranks)
    monkeypatch.setattr(elastic_runner, "describe_cluster", lambda spark: SimpleNamespace(slots=2))
    monkeypatch.setattr(run_options, "_driver_host", lambda spark: "127.0.0.1")
    monkeypatch.setattr(run_options, "_driver_bind_host", lambda spark: None)

    options = RunOptions(spark=None, start_timeout=10.0, env={}, stdout=None, stderr=None, verbose=1, nics=None,
                         timestamps=False, tail_lines=5, on_event=None, keep_warm=())
    elastic = _ElasticDriver(options, fn=print, args=(), kwargs={}, bounds=_Bounds(first=2, min=1, max=2),
                             elastic_timeout=1.0, reset_limit=reset_limit, max_commit_bytes=1 << 20, spill=None,
                             err=LineSink(err))
    return elastic, err


def lost(rank: int) -> RunError:
    return RunError(RankFailure(rank, "its process killed by signal SIGKILL (9) before fn returned", exit_code=-9))


def test_a_spark_failure_that_repeats_without_progress_is_raised_after_three_stages(monkeypatch):
    elastic, history = driver(monkeypatch, [SparkJobError("executor cannot start the task")] * 3)
    with pytest.raises(SparkJobError, match="cannot start"):
        elastic.run()
    assert history.getvalue().decode().count("a task or executor was lost") == 2


def test_a_spark_failure_after_a_commit_is_retried_from_that_commit(monkeypatch):
    elastic, history = driver(monkeypatch, [b"c1", SparkJobError("executor lost"), SparkJobError("executor lost"), b"c2",
                      SparkJobError("executor lost"), SparkJobError("executor lost"), ["r0", "r1"]])
    assert elastic.run() == ["r0", "r1"]
    text = history.getvalue().decode()
    assert "elastic stage 5: 2 rank(s), starting from the commit #1 of stage 3" in text, text


def test_a_raised_exception_is_not_retried(monkeypatch):
    own = RunError(RankFailure(1, "ValueError: bad", traceback="Traceback ...\nValueError: bad"))
    elastic, _ = driver(monkeypatch, [own])
    with pytest.raises(RunError) as raised:
        elastic.run()
    assert raised.value is own


def test_reset_limit_counts_the_reforms(monkeypatch):
    elastic, _ = driver(monkeypatch, [lost(1), lost(0)], reset_limit=1)
    with pytest.raises(ResetLimitError, match=r"re-formed 1 time\(s\), reset_limit=1; stage 2 ended: lost rank 0"):
        elastic.run()
