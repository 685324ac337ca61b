"""Allreduce of every dtype x op x size on 1-4 real processes over shm and tcp, against numpy."""

import pytest

from jobs import run_job

COUNTS = "0,1,7,1000,1048577"


@pytest.mark.timeout(400)
@pytest.mark.parametrize("num_proc", [1, 2, 3, 4])
def test_allreduce_matches_numpy(num_proc: int, transport: str) -> None:
    job = run_job("op_matrix.py", num_proc, transport, COUNTS, timeout_s=360)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(num_proc):
        records = {r["kind"]: r for r in job.records(rank)}
        if num_proc > 1:
            # The transport under test really carried the data.
            assert records["transport"]["shm"] == [transport == "shm"]
        assert records["matrix"]["failures"] == [], records["matrix"]["failures"][:10]
