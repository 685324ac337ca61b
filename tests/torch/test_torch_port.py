"""A Horovod-style training script runs under `python -m collective.run -np 2` with only its import changed."""

from __future__ import annotations

import pytest

from jobs import run_job


@pytest.mark.timeout(120)
def test_horovod_script_trains_on_two_ranks() -> None:
    job = run_job("torch_horovod_script.py", 2, timeout_s=90)
    assert job.returncode == 0, job.output[-4000:]
    (first,), (second,) = job.records(0), job.records(1)
    assert first["losses"][-1] < 0.6 * first["losses"][0], first
    assert first["accuracy"] > 0.7, first
    # Averaged metrics and the synchronised model are the same on both ranks.
    assert first == second
