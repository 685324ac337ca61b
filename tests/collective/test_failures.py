"""Unhappy paths: disagreeing ranks, a rank killed or leaving mid-allreduce, use before init, double init."""

import time

import numpy as np
import pytest

import collective as hvd
from jobs import ManualJob, run_job


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["direct", "engine"])
@pytest.mark.parametrize("num_proc", [2, 3])
def test_mismatch_is_a_clear_error_on_every_rank(num_proc: int, transport: str, mode: str) -> None:
    job = run_job("mismatch.py", num_proc, transport, mode, timeout_s=90)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(num_proc):
        records = job.records(rank)
        errors = {r["case"]: r["message"] for r in records if r["kind"] == "mismatch"}
        expected = {"dtype", "shape", "count", "op", "root"} | ({"kind"} if mode == "direct" else set())
        assert set(errors) == expected, records
        assert "'grad.w'" in errors["dtype"] and "float32" in errors["dtype"] and "float64" in errors["dtype"]
        assert "rank 0: float32" in errors["dtype"]
        assert "[2, 5]" in errors["shape"] and "[10]" in errors["shape"]
        assert "[5000000]" in errors["count"] and "[4000000]" in errors["count"]
        assert "Sum" in errors["op"] and "Max" in errors["op"]
        assert "root" in errors["root"]
        if mode == "direct":
            assert "allgather" in errors["kind"] and "allreduce" in errors["kind"]
        assert [r["ok"] for r in records if r["kind"] == "after"] == [True]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["direct", "engine"])
@pytest.mark.parametrize("num_proc", [2, 4])
def test_killed_rank_is_named_by_every_survivor_within_10s(num_proc: int, transport: str, mode: str) -> None:
    victim = 1
    with ManualJob("kill_target.py", num_proc, transport, mode) as job:
        for rank in range(num_proc):
            job.wait_for_line(rank, "looping")
        killed_at = time.time()
        job.kill(victim)
        for rank in range(num_proc):
            if rank == victim:
                continue
            record = job.first_report(rank, timeout_s=30)
            assert record["kind"] == "peer-failure", record
            assert record["rank"] == victim, record
            assert f"rank {victim}" in record["message"]
            assert record["at"] - killed_at < 10.0, f"rank {rank} took {record['at'] - killed_at:.1f} s"


@pytest.mark.timeout(240)
def test_a_killed_rank_is_named_on_every_rank_of_a_partial_mesh(transport: str) -> None:
    # Under the engine, 16 ranks hold only their ring neighbours and the coordinator (pairs connect on
    # first use): most survivors hold no connection to the victim and learn of it from the abort that the
    # ranks which saw it die pass on to their own peers.
    num_proc, victim = 16, 7
    with ManualJob("kill_target.py", num_proc, transport, "engine") as job:
        for rank in range(num_proc):
            job.wait_for_line(rank, "looping")
        job.kill(victim)
        for rank in range(num_proc):
            if rank == victim:
                continue
            record = job.first_report(rank, timeout_s=120)
            assert record["kind"] == "peer-failure", (rank, record)
            assert record["rank"] == victim, (rank, record)
            assert f"rank {victim}" in record["message"], (rank, record)


@pytest.mark.timeout(60)
def test_a_rank_that_leaves_mid_collective_is_named_at_once(transport: str) -> None:
    # Over shared memory a goodbye closes no socket: the waiting rank must notice it all the same, not
    # sit out the 60 s timeout (a Spark Connect rank whose fn failed leaves exactly this way).
    result = run_job("kill_target.py", 2, transport, "leave", timeout_s=30)
    assert result.returncode == 0, result.output
    (left,) = result.records(1)
    (seen,) = result.records(0)
    assert seen["kind"] == "peer-failure" and seen["rank"] == 1, seen
    assert "rank 1 has shut down" in seen["message"], seen
    assert seen["at"] - left["at"] < 10.0, f"rank 0 took {seen['at'] - left['at']:.1f} s to notice"


def test_ops_before_init_raise_not_initialized() -> None:
    assert not hvd.is_initialized()
    with pytest.raises(hvd.NotInitializedError, match="init"):
        hvd.allreduce(np.ones(3))
    with pytest.raises(hvd.NotInitializedError):
        hvd.rank()
    with pytest.raises(hvd.NotInitializedError):
        hvd.barrier()


def test_init_again_keeps_the_job_or_rejoins_with_new_arguments_and_shutdown_allows_reinit() -> None:
    hvd.init()
    try:
        assert (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size()) == (0, 1, 0, 1)
        assert (hvd.cross_rank(), hvd.cross_size()) == (0, 1)
        running = hvd.runtime.communicator()
        hvd.init()  # as in Horovod: a second init() keeps the running job
        assert hvd.runtime.communicator() is running
        hvd.init(timeout_s=7.0)  # with arguments: leaves the job and joins again with them
        assert hvd.runtime.communicator() is not running
        assert hvd.runtime.job_config().timeout_s == 7.0
        np.testing.assert_array_equal(hvd.allreduce(np.arange(4.0), op=hvd.Sum), np.arange(4.0))
    finally:
        hvd.shutdown()
    assert not hvd.is_initialized()
    hvd.init()
    hvd.shutdown()


def test_unsupported_dtype_names_the_tensor() -> None:
    hvd.init()
    try:
        with pytest.raises(hvd.InvalidArgumentError, match="'w'.*complex128"):
            hvd.allreduce(np.ones(3, np.complex128), name="w")
        with pytest.raises(hvd.InvalidArgumentError, match="splits"):
            hvd.alltoall(np.ones((4, 2)), splits=[1, 2])
    finally:
        hvd.shutdown()
