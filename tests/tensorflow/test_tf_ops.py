"""Every collective.tensorflow op, eagerly and inside tf.function, against numpy on 2 and 3 real ranks
(tests/workers/tf_ops.py): values, gradients, sparse gradients, grouped ops, objects, variables, TF1
Sessions, bad input (as Horovod's tf.errors) and process sets."""

from __future__ import annotations

import pytest

from jobs import JobResult, run_job

CASES = ["allreduce", "allreduce_scaling_and_compression", "grouped_allreduce", "allgather", "broadcast",
         "alltoall", "reducescatter", "gradients", "sparse_allreduce", "errors", "barrier_join_objects",
         "broadcast_variables", "repeated_graph_calls", "grouped_ops", "in_place_and_rank_ops", "tf1_session",
         "process_sets"]
TF_QUIET = {"TF_CPP_MIN_LOG_LEVEL": "3"}

_jobs: dict[int, JobResult] = {}


def job_on(num_proc: int) -> JobResult:
    """One job per world size runs every case in both modes; the tests below read its reports."""
    if num_proc not in _jobs:
        _jobs[num_proc] = run_job("tf_ops.py", num_proc, env=TF_QUIET, timeout_s=150)
    return _jobs[num_proc]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("num_proc", [2, 3])
@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("case", CASES)
def test_op(num_proc: int, mode: str, case: str) -> None:
    job = job_on(num_proc)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(num_proc):
        reports = {(r["case"], r["mode"]): r["failures"] for r in job.records(rank)}
        assert (case, mode) in reports, f"rank {rank} did not report {case} ({mode}):\n{job.output[-4000:]}"
        assert reports[case, mode] == [], f"rank {rank}: " + "\n".join(reports[case, mode])
