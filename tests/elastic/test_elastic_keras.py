"""An elastic Keras job under the local elastic launcher, on real processes: a rank killed mid-epoch."""

from __future__ import annotations

import json
import os
import signal
import sys

import numpy as np
import pytest

from elastic_job import SCRIPTS, ElasticJob, write_discovery

sys.path.insert(0, str(SCRIPTS))
from elastic_data import reference_weights  # noqa: E402

pytest.importorskip("keras")
pytestmark = pytest.mark.timeout(300)


def test_killed_rank_keras_fit_resumes_mid_epoch_from_the_last_commit(tmp_path):
    discovery, _ = write_discovery(tmp_path, ["hostA:2", "hostB:1"])
    # 3 epochs of 4 batches, a commit every 2: the victim stops after global step 7 (epoch 1, batch 3), so the
    # last commit holds epoch 1 with 2 batches done, and the survivors fit the epoch's last 2 batches again.
    with ElasticJob("keras_elastic_train.py", discovery, "--epochs", "3", "--steps", "4", "--commit-every", "2",
                    "--victim-rank", "2", "--victim-step", "7", min_np=2, max_np=3, timeout_s=200) as job:
        job.wait_for(r"RESUMED epoch=0 batch=0 size=3")
        victim = job.wait_for(r"VICTIM pid=(\d+) step=7")
        os.kill(int(victim.group(1)), signal.SIGKILL)
        job.wait_for(r"RESUMED epoch=1 batch=2 size=2")
        code, output = job.finish()
    assert code == 0, output
    final = json.loads(next(line.split("FINAL ", 1)[1] for line in output.splitlines() if "FINAL " in line))
    assert final["sizes"] == [3] * 6 + [2] * 6 and final["size"] == 2
    # Keras keeps the learning rate in float32 and applies it in its own order: equal to the float64 reference
    # to ~1e-8 (a step redone or lost from the commit would move the weights by ~1e-2).
    w, b = reference_weights(final["sizes"], lr_dtype=np.float32)
    np.testing.assert_allclose(final["w"], w, rtol=1e-6, atol=1e-7)
    assert final["b"] == pytest.approx(b, rel=1e-6, abs=1e-7)
