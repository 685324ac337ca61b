"""What a failing job's driver does with the events of its healthy ranks, without Spark: a fake job puts
events on the queue in the order the collector's reader threads can deliver them under load, where a
healthy rank's epoch metrics arrive after another rank's failure."""

from __future__ import annotations

import io
import queue
from typing import Any

import pytest

from spark_hvd.errors import RankFailure, RunError
from spark_hvd.launch.driver.barrier_job import JobFailed
from spark_hvd.launch.driver.output_collector import RankConnected, RankEvent, RankFailed
from spark_hvd.launch.driver.run_options import RanksLaunch
from spark_hvd.launch.driver.runner import run_ranks


class ScriptedJob:
    """A job whose start() puts the given events on the driver's queue, in order."""

    def __init__(self, events: "queue.SimpleQueue[Any]", script: list[Any]) -> None:
        self.events, self.script, self.cancelled = events, script, False

    def start(self) -> None:
        for event in script_with_connections(self.script):
            self.events.put(event)

    def cancel(self) -> None:
        self.cancelled = True


def script_with_connections(script: list[Any]) -> list[Any]:
    return [RankConnected(0), RankConnected(1), *script]


def launch(on_event: Any, err: io.StringIO) -> RanksLaunch:
    return RanksLaunch(num_proc=2, payload=b"", env={}, start_timeout=30.0, stdout=io.StringIO(), stderr=err,
                       verbose=0, tail_lines=5, on_event=on_event, collector_host=None, where="", job_label="a test job")


def run_script(script: list[Any], on_event: Any) -> tuple[RunError, list[ScriptedJob], str]:
    jobs: list[ScriptedJob] = []
    err = io.StringIO()

    def make_job(spec: Any, events: "queue.SimpleQueue[Any]") -> ScriptedJob:
        jobs.append(ScriptedJob(events, script))
        return jobs[-1]

    with pytest.raises(RunError) as raised:
        run_ranks(launch(on_event, err), make_job)
    return raised.value, jobs, err.getvalue()


def epoch(n: int) -> dict[str, Any]:
    return {"type": "epoch", "epoch": n, "metrics": {"loss": 1.0 / (n + 1)}}


FAILURE = RankFailed(RankFailure(1, "RuntimeError: injected", traceback="Traceback ...\nRuntimeError: injected"))


def test_a_healthy_ranks_events_queued_behind_a_failure_are_delivered() -> None:
    delivered: list[tuple[int, dict]] = []
    error, jobs, _ = run_script([FAILURE, RankEvent(0, epoch(0)), JobFailed(RuntimeError("stage failed")),
                                 RankEvent(0, epoch(1))],
                                lambda rank, data: delivered.append((rank, data)))
    assert error.rank == 1 and "injected" in str(error)
    assert jobs[0].cancelled
    assert delivered == [(0, epoch(0)), (0, epoch(1))]


def test_events_behind_a_job_failure_that_came_first_are_delivered() -> None:
    delivered: list[tuple[int, dict]] = []
    error, _, _ = run_script([JobFailed(RuntimeError("stage failed")), RankEvent(0, epoch(0)), FAILURE,
                              RankEvent(0, epoch(1))],
                             lambda rank, data: delivered.append((rank, data)))
    assert error.rank == 1
    assert delivered == [(0, epoch(0)), (0, epoch(1))]


def test_events_behind_a_peers_reaction_and_the_jobs_end_are_delivered() -> None:
    # Rank 0 reports only that its peer vanished; the job ends before rank 1 says anything.
    reaction = RankFailed(RankFailure(0, "PeerFailureError: rank 1 closed its connection", peer_failure=True,
                                      blamed_rank=1))
    delivered: list[tuple[int, dict]] = []
    error, jobs, _ = run_script([reaction, JobFailed(RuntimeError("stage failed")), RankEvent(0, epoch(0))],
                                lambda rank, data: delivered.append((rank, data)))
    assert error.rank == 1 and "stopped responding" in str(error)
    assert delivered == [(0, epoch(0))]


def test_a_callback_that_fails_while_the_job_fails_does_not_hide_the_ranks_error() -> None:
    calls: list[int] = []

    def refuse(rank: int, data: dict) -> None:
        calls.append(rank)
        raise OSError("tracking server unreachable")

    error, _, err = run_script([FAILURE, RankEvent(0, epoch(0)), RankEvent(0, epoch(1)),
                                JobFailed(RuntimeError("stage failed"))], refuse)
    assert error.rank == 1 and "injected" in str(error)
    # Said once, and the callback is not called again.
    assert err.count("event was not delivered while the job failed") == 1, err
    assert "tracking server unreachable" in err and calls == [0]
