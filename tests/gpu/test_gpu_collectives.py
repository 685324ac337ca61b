"""NCCL (one rank per GPU) and host staging (two ranks sharing one GPU) on CUDA tensors.

Skipped where torch sees no GPU; tests/gpu/run_on_gpu.sh runs these on a GPU machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from jobs import run_job

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

WORKER = str(Path(__file__).resolve().parent / "gpu_worker.py")
CASES = ["allreduce", "in_place_and_async", "grouped", "allgather", "broadcast", "reducescatter", "alltoall",
         "distributed_optimizer", "process_sets"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("num_proc, route", [(1, "nccl"), (2, "host staging"), (3, "host staging")])
def test_cuda_collectives(num_proc: int, route: str) -> None:
    if num_proc > 1 and torch.cuda.device_count() >= num_proc:
        route = "nccl"  # one GPU per rank: NCCL serves them
    job = run_job(WORKER, num_proc, timeout_s=200)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(num_proc):
        records = job.records(rank)
        assert records and records[0].get("route") == route, records[:1]
        reports = {r["case"]: r["failures"] for r in records[1:]}
        assert sorted(reports) == sorted(CASES), job.output[-4000:]
        failed = {case: f for case, f in reports.items() if f}
        assert not failed, f"rank {rank}: {failed}"
    if route == "host staging":
        assert "share a GPU" in job.output  # said once in the log
