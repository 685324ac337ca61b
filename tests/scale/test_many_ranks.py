"""Every numpy collective on jobs of 32, 64 and 128 ranks, on this machine however few its cores: each rank
checks every result (integers exactly, floats within a tolerance), and the test checks that every rank ran
every case and found nothing wrong."""

from __future__ import annotations

import pytest

from jobs import JobResult, run_job

pytestmark = pytest.mark.scale


def assert_every_rank_passed(job: JobResult, num_proc: int) -> None:
    assert job.returncode == 0, job.output[-6000:]
    silent = [rank for rank in range(num_proc) if not job.records(rank)]
    assert not silent, f"rank(s) {silent} reported nothing:\n{job.output[-6000:]}"
    failed = {rank: job.records(rank)[0]["failures"] for rank in range(num_proc) if job.records(rank)[0]["failures"]}
    assert not failed, failed
    ran = {tuple(job.records(rank)[0]["ran"]) for rank in range(num_proc)}
    assert len(ran) == 1, f"ranks ran different cases: {ran}"


@pytest.mark.timeout(420)
def test_128_ranks_every_op_over_shared_memory() -> None:
    assert_every_rank_passed(run_job("scale_collectives.py", 128, "shm", "direct", timeout_s=360), 128)


@pytest.mark.timeout(420)
def test_64_ranks_in_process_sets_and_every_op_through_the_engine() -> None:
    # Not the direct phase: the 128-rank job runs it over shared memory, the 32-rank one over TCP.
    job = run_job("scale_collectives.py", 64, "shm", "sets,engine", timeout_s=360)
    assert_every_rank_passed(job, 64)
    assert "named_async_requests_in_rank_dependent_orders" in job.records(0)[0]["ran"]


@pytest.mark.timeout(420)
def test_32_ranks_every_op_over_tcp_directly_and_through_the_engine() -> None:
    assert_every_rank_passed(run_job("scale_collectives.py", 32, "tcp", "direct,engine", timeout_s=360), 32)
