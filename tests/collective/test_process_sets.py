"""Process sets on the native ring: 3 and 4 ranks, overlapping and disjoint sets, direct and through the engine."""

import pytest

from jobs import run_job


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("num_proc", "path"), [(3, "engine"), (4, "direct"), (4, "engine")])
def test_process_sets(num_proc: int, path: str) -> None:
    job = run_job("process_sets.py", num_proc, path, timeout_s=120)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(num_proc):
        (record,) = job.records(rank)
        assert len(record["ran"]) >= 5
        assert record["failures"] == [], record["failures"]
