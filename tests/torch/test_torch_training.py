"""DistributedOptimizer, broadcast_optimizer_state and SyncBatchNorm on 2 real ranks, against
single-process training on the combined batch; the same job writes a timeline, checked here too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs import JobResult, run_job

CASES = ["matches_single_process", "backward_passes_per_step", "adam_state_broadcast",
         "fresh_optimizer_state_broadcast", "sparse_embeddings", "sparse_adam_with_sparse_as_dense", "compression_converges",
         "synchronize_and_guards", "mismatched_models", "unused_parameters", "sync_batch_norm"]


@pytest.fixture(scope="module")
def training_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[JobResult, Path]:
    timeline = tmp_path_factory.mktemp("timeline") / "timeline.json"
    return run_job("torch_train.py", 2, str(timeline), timeout_s=120), timeline


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", CASES)
def test_training(training_job: tuple[JobResult, Path], case: str) -> None:
    job, _ = training_job
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(2):
        reports = {r["case"]: r["failures"] for r in job.records(rank)}
        assert case in reports, f"rank {rank} did not report {case}:\n{job.output[-4000:]}"
        assert reports[case] == [], f"rank {rank}: " + "\n".join(reports[case])


@pytest.mark.timeout(180)
def test_timeline_is_chrome_trace_with_allreduce_phases(training_job: tuple[JobResult, Path]) -> None:
    job, timeline = training_job
    assert job.returncode == 0, job.output[-4000:]
    events = json.loads(timeline.read_text())
    assert isinstance(events, list)
    phases = [e for e in events if e.get("ph") == "X"]
    names = {e["name"] for e in phases}
    assert {"NEGOTIATE_ALLREDUCE", "QUEUE", "ALLREDUCE", "MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"} <= names
    assert all(isinstance(e["ts"], (int, float)) and e["dur"] >= 0 for e in phases)
    # One row per tensor, named after it: the DistributedOptimizer's gradients appear by parameter name.
    rows = {e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert {"0.weight", "4.bias"} <= rows, sorted(rows)[:20]
