"""Per-collective cases (uneven allgather and alltoall, every broadcast root, reducescatter) on real processes."""

import pytest

from jobs import run_job


@pytest.mark.timeout(200)
@pytest.mark.parametrize("num_proc", [1, 2, 3, 4])
def test_collectives(num_proc: int, transport: str) -> None:
    job = run_job("op_cases.py", num_proc, transport, "direct", timeout_s=170)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(num_proc):
        (record,) = job.records(rank)
        assert len(record["ran"]) == 12
        assert record["failures"] == [], record["failures"]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("num_proc", [1, 2, 3])
def test_collectives_through_the_engine(num_proc: int, transport: str) -> None:
    job = run_job("op_cases.py", num_proc, transport, "engine", timeout_s=170)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(num_proc):
        (record,) = job.records(rank)
        assert len(record["ran"]) == 12
        assert record["failures"] == [], record["failures"]
