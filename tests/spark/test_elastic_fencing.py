"""A stage that spark_hvd.run_elastic gives up on is fenced: once its start timeout expires, its ranks can no longer
form a job and run fn, nor can what it commits become the next stage's start. The race of Horovod's
test_happy_run_elastic under load (a rank that starts just after the timeout, so that two formations ran fn) is
reproduced deterministically: a hook holds rank 1 before it reports that it started, and releases it only
once the driver has given the stage up."""

from __future__ import annotations

import functools
import io
import os

import pytest
from pyspark import cloudpickle as spark_cloudpickle

import elastic_functions
import spark_hvd
from by_value import pickled_by_value
from elastic_functions import counted_train, hold_at_start
from spark_hvd.launch.driver import runner
from spark_hvd.launch.driver.barrier_job import BarrierJob
from spark_hvd.launch.task_spec import TaskSpec

pytestmark = [pytest.mark.usefixtures("elastic_functions_by_value"), pytest.mark.spark, pytest.mark.timeout(240)]

# How long the given-up stage has to end by itself (its ranks refused at the fenced rendezvous) before the test
# lets the driver cancel it anyway; a stage that was not fenced runs fn to its end meanwhile.
_STAGE_END_S = 60.0


def test_a_stage_given_up_at_its_start_timeout_never_runs_fn(local_spark, tmp_path, monkeypatch) -> None:
    os.mkfifo(tmp_path / "release")
    monkeypatch.setattr(runner, "TaskSpec",
                        functools.partial(TaskSpec, before_start=functools.partial(hold_at_start, 1, str(tmp_path))))
    ended_by_itself = []
    cancel_spark_job = BarrierJob._cancel_spark_job

    def release_the_held_rank_then_cancel(job: BarrierJob) -> None:
        # The driver has given the stage up (and fenced it): the held rank goes on as a late starter would.
        if not ended_by_itself:
            with open(tmp_path / "release", "w") as release:
                release.write("go")
            ended_by_itself.append(job.join(_STAGE_END_S))
        cancel_spark_job(job)

    monkeypatch.setattr(BarrierJob, "_cancel_spark_job", release_the_held_rank_then_cancel)
    err = io.StringIO()
    # The hook travels inside the Spark task's closure, which pyspark's own cloudpickle pickles.
    with pickled_by_value(elastic_functions, pickler=spark_cloudpickle):
        results = spark_hvd.run_elastic(counted_train, args=(str(tmp_path),), num_proc=2, start_timeout=8,
                                        stdout=io.StringIO(), stderr=err, spark=local_spark)
    history = err.getvalue()
    assert "elastic stage 1 ended" in history and "did not start within start_timeout" in history, history
    assert ended_by_itself == [True], history
    # fn ran in one formation only (stage 2), which started from the script's state: one rendezvous.
    assert (tmp_path / "fn_starts").read_text().count("pid=") == 1
    assert "elastic stage 2: 2 rank(s), starting from the script's initial state" in history, history
    assert [(r["rank"], r["rendezvous"], r["step"]) for r in results] == [(0, 1, 4), (1, 1, 4)]
