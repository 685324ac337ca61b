"""collective.run names the rank that failed, never a survivor that noticed: real 3-rank jobs on loopback,
each failure staged on every rank in turn, repeated to catch the race between the ranks' exits."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest

from collective import run
from collective.config import ENV_TIMEOUT

JOB = str(Path(__file__).resolve().parent / "scripts" / "blame_job.py")


def _launch(mode: str, victim: int, survivors: str = "raise", **env: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run.launch([JOB, mode, str(victim), survivors], 3, timeout_s=60.0, env={**os.environ, **env},
                      term_grace_s=0.5, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _blamed(err: str) -> int:
    found = re.search(r"rank (\d+) failed first: (.*)", err)
    assert found, err
    return int(found.group(1))


@pytest.mark.timeout(240)
def test_a_raising_or_killed_rank_is_blamed_whichever_exit_is_reaped_first() -> None:
    for trial in range(12):
        victim, mode = trial % 3, ("raise", "sigkill")[trial // 3 % 2]
        code, out, err = _launch(mode, victim)
        assert code != 0
        assert _blamed(err) == victim, (trial, mode, err)
        if mode == "raise":
            # The victim's goodbye fails the survivors at once, so one of their exits may be reaped before
            # the victim's: the launcher then blames the victim by its traceback, before it has an exit code.
            assert re.search(rf"rank {victim} failed first: (exited with code 1: )?ValueError: rank {victim} gives up",
                             err), err
        else:
            assert f"rank {victim} failed first: killed by signal SIGKILL" in err
        # A survivor that noticed in time names the victim too (the first one to notice always does).
        for rank, blamed in re.findall(r"rank (\d) noticed \w+ naming rank=(\w+)", out):
            assert blamed == str(victim) or int(rank) != victim, out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("survivors", ["raise", "exit"])
def test_a_stopped_rank_is_blamed_and_named_by_the_first_rank_to_time_out(survivors: str) -> None:
    """Whether the survivors let the collective's error end them or catch it and sys.exit (which no
    excepthook sees), the launcher blames the stopped rank, not the survivor whose exit it reaped first."""
    for victim in range(3):
        code, out, err = _launch("sigstop", victim, survivors, **{ENV_TIMEOUT: "2"})
        assert code == (3 if survivors == "exit" else 1), err
        assert _blamed(err) == victim, err
        assert f"rank {victim} failed first: stopped responding" in err
        noticed = re.findall(r"rank (\d) noticed (\w+) naming rank=(\w+)", out)
        assert noticed, out
        assert any(blamed == str(victim) for _, _, blamed in noticed), out
