"""DistributedGradientTape, PartialDistributedGradientTape and the TF1 and Keras optimizers on process
sets (tests/workers/tf_process_set_train.py): the even and the odd ranks train at the same time, each set
against one process trained on its members' data, on 3 ranks (sets of 2 and of 1) and 4 (two sets of 2)."""

from __future__ import annotations

import pytest

from jobs import JobResult, run_job

CASES = ["tape_trains_per_set", "tape_options_per_set", "fit_trains_per_set", "outside_the_set"]

_jobs: dict[int, JobResult] = {}


def job_on(num_proc: int) -> JobResult:
    if num_proc not in _jobs:
        _jobs[num_proc] = run_job("tf_process_set_train.py", num_proc, env={"TF_CPP_MIN_LOG_LEVEL": "3"},
                                  timeout_s=240)
    return _jobs[num_proc]


def check_case(job: JobResult, num_proc: int, case: str, mode: str) -> None:
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(num_proc):
        reports = {(r["case"], r["mode"]): r["failures"] for r in job.records(rank)}
        assert (case, mode) in reports, f"rank {rank} did not report {case} ({mode}):\n{job.output[-4000:]}"
        assert reports[case, mode] == [], f"rank {rank}: " + "\n".join(reports[case, mode])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("num_proc", [3, 4])
@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("case", CASES)
def test_training_on_process_sets(num_proc: int, case: str, mode: str) -> None:
    check_case(job_on(num_proc), num_proc, case, mode)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("num_proc", [3, 4])
def test_tf1_optimizer_on_process_sets(num_proc: int) -> None:
    check_case(job_on(num_proc), num_proc, "tf1_optimizer_per_set", "eager")
