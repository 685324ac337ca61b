"""collective.torch with process sets on 3 real ranks: ops, gradients, join and DistributedOptimizer per set."""

import pytest

from jobs import run_job


@pytest.mark.timeout(150)
def test_torch_process_sets() -> None:
    job = run_job("torch_process_sets.py", 3, timeout_s=120)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(3):
        (record,) = job.records(rank)
        assert len(record["ran"]) == 7
        assert record["failures"] == [], record["failures"]
