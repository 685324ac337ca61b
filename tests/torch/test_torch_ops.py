"""Every collective.torch op against a torch reference on 2 and 3 real ranks (tests/workers/torch_ops.py)."""

from __future__ import annotations

import pytest

from jobs import JobResult, run_job

CASES = ["allreduce", "allreduce_in_place", "allreduce_async", "allreduce_scaling", "allreduce_special_shapes",
         "allreduce_autograd", "allreduce_compression", "grouped_allreduce", "allgather", "broadcast", "alltoall",
         "reducescatter", "grouped_allgather", "grouped_reducescatter", "sparse_allreduce",
         "out_of_order", "mismatch", "invalid_arguments", "objects", "broadcast_parameters",
         "poll_and_barrier", "join", "bad_arguments_are_value_errors", "automatic_names_stay_in_step",
         "timeline"]

_jobs: dict[int, JobResult] = {}


def job_on(num_proc: int) -> JobResult:
    """One job per world size runs every case; the tests below read its reports."""
    if num_proc not in _jobs:
        _jobs[num_proc] = run_job("torch_ops.py", num_proc, timeout_s=90)
    return _jobs[num_proc]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("num_proc", [2, 3])
@pytest.mark.parametrize("case", CASES)
def test_op(num_proc: int, case: str) -> None:
    job = job_on(num_proc)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(num_proc):
        reports = {r["case"]: r["failures"] for r in job.records(rank)}
        assert case in reports, f"rank {rank} did not report {case}:\n{job.output[-4000:]}"
        assert reports[case] == [], f"rank {rank}: " + "\n".join(reports[case])
