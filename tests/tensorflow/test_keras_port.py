"""examples/keras_train.py, a Horovod Keras script with its import changed, trains on 2 ranks."""

from __future__ import annotations

import re

import pytest

from jobs import WORKERS, run_job

EXAMPLE = str(WORKERS.parent.parent / "examples" / "keras_train.py")


@pytest.mark.timeout(200)
def test_keras_example_trains_on_two_ranks() -> None:
    job = run_job(EXAMPLE, 2, env={"TF_CPP_MIN_LOG_LEVEL": "3"}, timeout_s=150)
    assert job.returncode == 0, job.output[-4000:]
    accuracies = [float(a) for a in re.findall(r"^\[0\]<stdout>:.*? accuracy: ([0-9.]+)", job.output, re.MULTILINE)]
    assert len(accuracies) == 4, job.output[-4000:]
    assert accuracies[-1] > 0.8 and accuracies[-1] > accuracies[0], accuracies
    assert "finished gradual learning rate warmup" in job.output, job.output[-4000:]
    assert "max weight difference across ranks: 0\n" in job.output, job.output[-4000:]
