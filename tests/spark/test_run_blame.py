"""spark_hvd.run names the rank that failed, never the survivor that noticed: on each rank in turn of a
local[2] job, the rank raises, its process is SIGKILLed, its Spark task is SIGKILLed under it, or it stops
(while the survivor lets the collective's error go, or catches it and exits)."""

from __future__ import annotations

import io

import pytest

import spark_hvd
from collective.config import ENV_TIMEOUT
from rank_functions import fail_on_rank, stop_rank_survivors_exit

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

_EXPECTED = {
    "raise": "ValueError: rank {victim} gives up",
    "kill_child": "killed by signal SIGKILL",
    "kill_task": "died or stopped responding",
    "sigstop": "died or stopped responding",
}


@pytest.mark.parametrize("mode", sorted(_EXPECTED))
def test_every_report_names_the_failed_rank(local_spark, mode: str) -> None:
    for victim in (0, 1):
        with pytest.raises(spark_hvd.RunError) as caught:
            # A short collective timeout, so that the survivor of a stopped rank notices in seconds.
            spark_hvd.run(fail_on_rank, args=(mode, victim), num_proc=2, env={ENV_TIMEOUT: "3"},
                          stdout=io.StringIO(), stderr=io.StringIO())
        error = caught.value
        assert error.rank == victim, (mode, victim, str(error))
        assert str(error).startswith(f"spark_hvd.run: rank {victim} failed: "), str(error)
        assert _EXPECTED[mode].format(victim=victim) in error.failure.summary, str(error)
        survivor = 1 - victim
        # What the survivor saw, when it reported in time, names the victim too.
        for other in error.other_failures:
            assert other.rank == survivor and other.blamed_rank in (victim, None), str(error)


def test_a_stopped_rank_is_named_when_the_survivor_catches_the_error_and_exits(local_spark) -> None:
    for victim in (0, 1):
        with pytest.raises(spark_hvd.RunError) as caught:
            spark_hvd.run(stop_rank_survivors_exit, args=(victim,), num_proc=2, env={ENV_TIMEOUT: "3"},
                          stdout=io.StringIO(), stderr=io.StringIO())
        error = caught.value
        assert error.rank == victim, (victim, str(error))
        assert "died or stopped responding" in error.failure.summary, str(error)
        # The survivor's own report is its exit, marked as its reaction to the victim.
        for other in error.other_failures:
            assert other.rank == 1 - victim and other.peer_failure and other.blamed_rank == victim, str(error)
