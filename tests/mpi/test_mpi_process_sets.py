"""Process sets under `mpiexec -n 3` and `-n 4`: the ring cases of tests/workers (overlapping and disjoint
sets, from threads at once, numpy and torch, checked against numpy) on both backends, and sets given by an
mpi4py communicator, which only the MPI backend accepts."""

from __future__ import annotations

import importlib.util

import pytest

from mpi_jobs import mpiexec, run_mpi_job



@pytest.mark.timeout(200)
@pytest.mark.parametrize(("num_proc", "path"), [(3, "engine"), (4, "direct"), (4, "engine")])
def test_process_sets(backend: str, num_proc: int, path: str) -> None:
    job = run_mpi_job("process_sets.py", num_proc, path, backend=backend, timeout_s=170)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(num_proc):
        (record,) = job.records(rank)
        assert len(record["ran"]) >= 5, record
        assert record["failures"] == [], record["failures"]


@pytest.mark.timeout(200)
def test_torch_process_sets(backend: str) -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    job = run_mpi_job("torch_process_sets.py", 3, backend=backend, timeout_s=170)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(3):
        (record,) = job.records(rank)
        assert len(record["ran"]) == 7, record
        assert record["failures"] == [], record["failures"]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("num_proc", [3, 4])
def test_sets_given_by_mpi_communicators(backend: str, num_proc: int) -> None:
    job = run_mpi_job("comm_process_sets.py", num_proc, backend=backend, timeout_s=170)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(num_proc):
        (record,) = job.records(rank)
        assert record["failures"] == [], record["failures"]
        assert len(record["ran"]) == (4 if backend == "mpi" else 1), record


@pytest.mark.timeout(420)
def test_tensorflow_ops_and_process_sets() -> None:
    """tests/workers/tf_ops.py (every collective.tensorflow case, eager and graph, process sets included)
    with MPI moving the data; the ring runs it in tests/tensorflow."""
    if mpiexec() is None or any(importlib.util.find_spec(m) is None for m in ("tensorflow", "mpi4py")):
        pytest.skip("mpiexec, tensorflow or mpi4py is not installed")
    job = run_mpi_job("tf_ops.py", 3, backend="mpi", timeout_s=400)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(3):
        reports = {(r["case"], r["mode"]): r["failures"] for r in job.records(rank)}
        assert {("process_sets", "eager"), ("process_sets", "graph")} <= set(reports), sorted(reports)
        failed = {key: f for key, f in reports.items() if f}
        assert not failed, f"rank {rank}: {failed}"


@pytest.mark.timeout(200)
def test_init_over_a_communicator_or_a_list_of_world_ranks(backend: str) -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    job = run_mpi_job("init_comm.py", 3, backend=backend, timeout_s=170)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(3):
        (record,) = job.records(rank)
        assert record["ran"] == ["job_over_a_split_communicator", "job_over_a_list_of_world_ranks",
                                 "wrong_comms_are_named"], record
        assert record["failures"] == [], record["failures"]
