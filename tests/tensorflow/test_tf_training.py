"""DistributedGradientTape and collective.keras on 2 real ranks, against single-process training on the
combined batch (tests/workers/tf_train.py): model.fit compiled and eager, gradient aggregation,
callbacks, load_model, local layers, SyncBatchNormalization, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import JobResult, run_job

CASES = ["tape_matches_single_process", "tape_overlaps_backward", "tape_shape_mismatch", "tape_sparse_gradients",
         "tape_options",
         "fit_matches_single_process",
         "fit_backward_passes_per_step", "learning_rate_warmup", "learning_rate_schedule", "load_model_round_trip",
         "local_layers", "sync_batch_norm", "keras_value_ops"]


@pytest.fixture(scope="module")
def training_job(tmp_path_factory: pytest.TempPathFactory) -> JobResult:
    scratch: Path = tmp_path_factory.mktemp("keras_models")
    return run_job("tf_train.py", 2, str(scratch), env={"TF_CPP_MIN_LOG_LEVEL": "3"}, timeout_s=200)


def reports_of(job: JobResult, rank: int) -> dict[tuple[str, str], list[str]]:
    return {(r["case"], r["mode"]): r["failures"] for r in job.records(rank)}


@pytest.mark.timeout(260)
@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("case", CASES)
def test_training(training_job: JobResult, case: str, mode: str) -> None:
    assert training_job.returncode == 0, training_job.output[-4000:]
    for rank in range(2):
        reports = reports_of(training_job, rank)
        assert (case, mode) in reports, f"rank {rank} did not report {case} ({mode}):\n{training_job.output[-4000:]}"
        assert reports[case, mode] == [], f"rank {rank}: " + "\n".join(reports[case, mode])


@pytest.mark.timeout(260)
def test_bad_input_is_rejected_clearly(training_job: JobResult) -> None:
    assert training_job.returncode == 0, training_job.output[-4000:]
    for rank in range(2):
        assert reports_of(training_job, rank).get(("bad_input", "eager")) == [], training_job.output[-4000:]
