"""The collective and torch worker cases, started by `mpiexec -n N` instead of collective.run.

Each runs twice: bootstrapped through MPI with the native ring moving the data (backend "ring"), and
with MPI moving the data too (backend "mpi").
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from jobs import JobResult
from mpi_jobs import run_mpi_job


def _torch_cases() -> list[str]:
    """The case names tests/torch/test_torch_ops.py expects from the same worker."""
    path = Path(__file__).resolve().parent.parent / "torch" / "test_torch_ops.py"
    spec = importlib.util.spec_from_file_location("_torch_ops_cases", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.CASES)


TORCH_CASES = _torch_cases()


def assert_clean(job: JobResult, num_proc: int) -> None:
    assert job.returncode == 0, job.output[-4000:]
    assert sorted(job.results) == list(range(num_proc)), job.output[-4000:]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("num_proc", [2, 3])
@pytest.mark.parametrize("mode", ["direct", "engine"])
def test_collective_cases(backend: str, num_proc: int, mode: str) -> None:
    job = run_mpi_job("op_cases.py", num_proc, "shm", mode, backend=backend, timeout_s=170)
    assert_clean(job, num_proc)
    for rank in range(num_proc):
        (record,) = job.records(rank)
        assert len(record["ran"]) == 12
        assert record["failures"] == [], record["failures"]


@pytest.mark.timeout(200)
def test_out_of_place_allreduce(backend: str) -> None:
    job = run_mpi_job("engine_out_of_place.py", 2, "shm", backend=backend, timeout_s=170)
    assert_clean(job, 2)
    for rank in range(2):
        (record,) = job.records(rank)
        assert len(record["ran"]) == 3
        assert record["failures"] == [], record["failures"]


@pytest.mark.timeout(200)
def test_allreduce_matrix(backend: str) -> None:
    job = run_mpi_job("op_matrix.py", 2, "shm", "0,1,7,1000,100003", backend=backend, timeout_s=170)
    assert_clean(job, 2)
    for rank in range(2):
        records = {r["kind"]: r for r in job.records(rank)}
        assert records["matrix"]["failures"] == [], records["matrix"]["failures"]
        assert records["transport"]["shm"] == [True]  # one host: MPI puts both ranks in one shared domain


@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode", ["direct", "engine"])
def test_mismatch_is_a_clear_error(backend: str, mode: str) -> None:
    job = run_mpi_job("mismatch.py", 2, "shm", mode, backend=backend, timeout_s=170)
    assert_clean(job, 2)
    for rank in range(2):
        records = job.records(rank)
        errors = {r["case"]: r["message"] for r in records if r["kind"] == "mismatch"}
        assert set(errors) == {"dtype", "shape", "count", "op", "root"} | ({"kind"} if mode == "direct" else set())
        assert "'grad.w'" in errors["dtype"] and "rank 0: float32" in errors["dtype"]
        assert "[2, 5]" in errors["shape"] and "[10]" in errors["shape"]
        assert "Sum" in errors["op"] and "Max" in errors["op"]
        assert [r["ok"] for r in records if r["kind"] == "after"] == [True]


@pytest.mark.timeout(200)
def test_torch_ops(backend: str) -> None:
    job = run_mpi_job("torch_ops.py", 2, backend=backend, timeout_s=170)
    assert_clean(job, 2)
    for rank in range(2):
        reports = {r["case"]: r["failures"] for r in job.records(rank)}
        assert set(reports) == set(TORCH_CASES), sorted(set(TORCH_CASES) - set(reports))
        failed = {case: f for case, f in reports.items() if f}
        assert not failed, f"rank {rank}: {failed}"


@pytest.mark.timeout(200)
def test_torch_training(backend: str, tmp_path: Path) -> None:
    """DistributedOptimizer, broadcast_optimizer_state and SyncBatchNorm against single-process training."""
    job = run_mpi_job("torch_train.py", 2, str(tmp_path / "timeline.json"), backend=backend, timeout_s=170)
    assert_clean(job, 2)
    for rank in range(2):
        reports = {r["case"]: r["failures"] for r in job.records(rank)}
        assert len(reports) >= 3, reports
        failed = {case: f for case, f in reports.items() if f}
        assert not failed, f"rank {rank}: {failed}"


@pytest.mark.timeout(120)
def test_rank_size_and_local_rank_come_from_mpi(backend: str) -> None:
    job = run_mpi_job(str(Path(__file__).resolve().parent / "topology_worker.py"), 3, backend=backend, timeout_s=90)
    assert_clean(job, 3)
    for rank in range(3):
        (record,) = job.records(rank)
        assert record["mpi"] == [rank, 3, rank, 3]  # one host: one shared-memory domain
        assert record["ours"] == [rank, 3, rank, 3, 0, 1]
        # Under mpiexec: MPI is enabled only when it moves the data; the native ring plays Gloo's role.
        queries = record["queries"]
        assert (queries["mpi_enabled"], queries["gloo_enabled"]) == (backend == "mpi", backend != "mpi"), queries
        assert queries["mpi_built"] is True and queries["gloo_built"] is True
        assert not any(queries[name] for name in ("rocm_built", "ccl_built", "ddl_built")), queries
        # MPI's threading level counts only where MPI moves the data; one host is homogeneous.
        assert queries["mpi_threads_supported"] is (backend == "mpi" and record["thread_multiple"]), queries
        assert queries["is_homogeneous"] is True


@pytest.mark.timeout(150)
def test_a_dying_rank_ends_the_job(backend: str) -> None:
    """mpiexec takes the job down with rank 1's exit code (on the ring, rank 0 would also name the dead
    peer, but mpiexec usually stops it first). Either way nothing hangs."""
    job = run_mpi_job(str(Path(__file__).resolve().parent / "dying_worker.py"), 2, backend=backend, timeout_s=120)
    assert job.returncode != 0, job.output[-3000:]
    assert "Exit code:    3" in job.output or "PeerFailureError" in job.output, job.output[-3000:]


@pytest.mark.timeout(120)
def test_an_mpi_engine_whose_peer_never_cycles_times_out() -> None:
    job = run_mpi_job(str(Path(__file__).resolve().parent / "stuck_peer_worker.py"), 2, backend="mpi", timeout_s=90)
    # Both ranks leave without MPI_Finalize (a request is still pending), which mpiexec reports as rc 1.
    assert sorted(job.results) == [0, 1], job.output[-3000:]
    (verdict,) = job.records(0)
    assert job.records(1) == [{"saw": verdict}]
    assert verdict["error"] == "CollectiveTimeoutError", verdict
    assert "did not complete within 3s" in verdict["message"]


@pytest.mark.timeout(120)
def test_repeated_steps_are_announced_from_the_engine_cache() -> None:
    """Unnamed calls are auto-named anew each step, yet a repeated step is a cache hit: after the first
    step's batches (the unnamed allreduce, the named pair, the allgather whose rows differ per rank)
    nothing new is cached, and every result stays right."""
    job = run_mpi_job(str(Path(__file__).resolve().parent / "steady_state_worker.py"), 2, backend="mpi",
                      timeout_s=90)
    assert_clean(job, 2)
    for rank in range(2):
        (record,) = job.records(rank)
        assert record["wrong"] == [], record["wrong"]
        assert 1 <= record["cached_batches"] <= 6, record  # a step's batches, far fewer than 12 steps' worth


@pytest.mark.timeout(150)
def test_engine_timeline_read_back(backend: str, tmp_path: Path) -> None:
    """The MPI engine writes the ring engine's timeline (same format, same phase names): from init and
    between start_timeline/stop_timeline, on rank 0 only."""
    at_init, at_run = tmp_path / "init.json", tmp_path / "run.json"
    job = run_mpi_job("engine_timeline.py", 3, str(at_init), str(at_run), backend=backend, timeout_s=120)
    assert_clean(job, 3)
    for rank in (1, 2):
        assert job.records(rank) == [{"kind": "timeline", "rank": rank, "files": [True, True], "right": True}]
    (record,) = job.records(0)
    assert record["right"] is True
    first, second = record["at_init"], record["at_run"]
    assert first["rows"] == ["from.init"] and {"NEGOTIATE_ALLREDUCE", "QUEUE", "ALLREDUCE"} <= set(first["phases"]), first
    assert second["rows"] == [*(f"fused.{i}" for i in range(8)), "traced.allgather", "traced.broadcast"], second
    assert {"NEGOTIATE_ALLREDUCE", "NEGOTIATE_ALLGATHER", "NEGOTIATE_BROADCAST", "QUEUE", "MEMCPY_IN_FUSION_BUFFER",
            "ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER", "BROADCAST", "ALLGATHER"} <= set(second["phases"]), second
    # Submitted together, some of the eight were fused (how many per cycle is up to timing): "N tensors, B bytes".
    fused = [[int(word) for word in detail.split()[::2]] for detail in second["fused"]]
    assert fused and all(n >= 2 and nbytes == 32 * n for n, nbytes in fused), second
    assert second["cycles"] >= 1 and second["process"] == ["rank 0"], second
    assert first["orphans"] == second["orphans"] == [] and first["bad_spans"] == second["bad_spans"] == []


@pytest.mark.timeout(200)
def test_engine_cases_stall_shutdown_and_warnings(backend: str, tmp_path: Path) -> None:
    """tests/workers/engine_cases.py under mpiexec -n 3: ordering, fusion, groups, names in flight, join, and
    the stall inspector: each rank withholds a tensor, the 60 s-style warning names the missing ranks in the
    native engine's words, and the stall shutdown (1.5 s here) fails it on every rank naming them, not
    after timeout_s x 4."""
    job = run_mpi_job("engine_cases.py", 3, str(tmp_path / "timeline.json"), backend=backend, timeout_s=170)
    assert_clean(job, 3)
    for rank in range(3):
        (record,) = job.records(rank)
        assert len(record["ran"]) == 6 and record["failures"] == [], record
        missing = ", ".join(str(r) for r in range(3) if r != rank)
        warning = f"stall: allreduce 'withheld.{rank}' was submitted by rank(s) {rank} but not by rank(s) {missing}"
        assert warning in job.output, job.output[-3000:]
