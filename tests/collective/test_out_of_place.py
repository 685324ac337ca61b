"""Out-of-place allreduce through the engine, the path the TensorFlow gradients take: every size's
path, every dtype and op, scaling, fusion and refused calls, on 2 and 3 ranks, over shared memory and TCP
(tests/workers/engine_out_of_place.py); tests/mpi runs the same worker on the MPI engine."""

import pytest

from jobs import run_job


@pytest.mark.timeout(200)
@pytest.mark.parametrize("num_proc", [2, 3])
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_out_of_place_allreduce(num_proc: int, transport: str) -> None:
    job = run_job("engine_out_of_place.py", num_proc, transport, timeout_s=170)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(num_proc):
        (record,) = job.records(rank)
        assert len(record["ran"]) == 3
        assert record["failures"] == [], record["failures"]
