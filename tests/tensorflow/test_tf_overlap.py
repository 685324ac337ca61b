"""The overlapped gradient allreduce on 2 real ranks (tests/workers/tf_overlap.py), eagerly and in a
tf.function: buffer reuse and failed steps."""

from __future__ import annotations

import pytest

from jobs import run_job


@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_overlap_buffers_and_failed_steps(mode: str) -> None:
    job = run_job("tf_overlap.py", 2, mode, env={"TF_CPP_MIN_LOG_LEVEL": "3"}, timeout_s=150)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(2):
        (record,) = job.records(rank)
        assert len(record["ran"]) == 3
        assert record["failures"] == [], record["failures"]
