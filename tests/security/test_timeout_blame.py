"""A stopped rank (SIGSTOP: alive, connected, silent) is the one every survivor's timeout blames."""

from __future__ import annotations

import os
import signal

import pytest

from jobs import ManualJob

SIZE = 3
TIMEOUT_S = 3.0


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["direct", "engine"])
@pytest.mark.parametrize("victim", range(SIZE))
def test_a_stopped_rank_is_named_by_every_survivor(victim: int, mode: str, transport: str) -> None:
    with ManualJob("stall_target.py", SIZE, transport, mode, str(TIMEOUT_S)) as job:
        for rank in range(SIZE):
            job.wait_for_line(rank, "looping")
        os.kill(job.procs[victim].pid, signal.SIGSTOP)
        try:
            for rank in range(SIZE):
                if rank == victim:
                    continue
                record = job.first_report(rank, timeout_s=60)
                assert record["rank"] == victim, (rank, record)
                assert f"rank {victim}" in record["message"], (rank, record)
        finally:
            os.kill(job.procs[victim].pid, signal.SIGCONT)
