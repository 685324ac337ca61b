"""Small calls gathered in a few rounds of relayed blocks (native/algorithms/block_allgather.cc): correct
against numpy, bit-identical on every rank, the same mismatch error everywhere, directly and through the engine."""

from __future__ import annotations

import pytest

from collective.config import ENV_CONNECT_TIMEOUT, ENV_SMALL_CALL_RADIX
from jobs import JobResult, run_job


def check_job(job: JobResult, num_proc: int) -> None:
    assert job.returncode == 0, job.output[-4000:]
    for phase in ("direct", "engine"):
        records = {rank: {r["kind"]: r for r in job.records(rank) if r["phase"] == phase} for rank in range(num_proc)}
        for rank in range(num_proc):
            assert records[rank]["allreduce"]["failures"] == [], (rank, records[rank]["allreduce"]["failures"][:5])
            assert records[rank]["others"]["failures"] == [], (rank, records[rank]["others"]["failures"])
        # Every rank reduced every rank's tensor in rank order: the same bits everywhere.
        digests = {records[rank]["allreduce"]["digest"] for rank in range(num_proc)}
        assert len(digests) == 1, (phase, digests)
        messages = {records[rank]["mismatch"]["message"] for rank in range(num_proc)}
        (message,) = messages
        assert message is not None and "dtype" in message and "rank 1: float32" in message, message


# Radix 2 is Bruck's log2(p) rounds; 3 and 4 relay blocks too, with a partial last round at these sizes.
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("num_proc", "radix"), [(3, 2), (5, 2), (5, 4), (8, 2), (8, 3)])
def test_forced_radix(num_proc: int, radix: int) -> None:
    job = run_job("small_calls.py", num_proc, "direct", "engine", env={ENV_SMALL_CALL_RADIX: str(radix)},
                  timeout_s=240)
    check_job(job, num_proc)


@pytest.mark.timeout(600)
def test_sixty_four_ranks_with_the_model_s_radix() -> None:
    # 64 processes on a loaded machine may take more than the default minute to all start.
    job = run_job("small_calls.py", 64, "direct", "engine", env={ENV_CONNECT_TIMEOUT: "400"}, timeout_s=540)
    check_job(job, 64)
