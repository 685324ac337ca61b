"""Elastic torch jobs under the local elastic launcher, on real processes: a rank killed mid-epoch, a slot
added, and too few slots for too long."""

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

pytestmark = pytest.mark.timeout(240)


def final_record(output: str) -> dict:
    finals = [line.split("FINAL ", 1)[1] for line in output.splitlines() if "FINAL " in line]
    assert len(finals) == 1, output
    return json.loads(finals[0])


def test_killed_rank_survivors_resume_from_the_last_commit(tmp_path):
    discovery, _ = write_discovery(tmp_path, ["hostA:2", "hostB:1"])
    with ElasticJob("torch_elastic_train.py", discovery, "--steps", "12", "--commit-every", "3",
                    "--victim-rank", "2", "--victim-step", "7", min_np=2, max_np=3) as job:
        job.wait_for(r"RESUMED step=0 size=3")
        victim = job.wait_for(r"VICTIM pid=(\d+) step=7")
        os.kill(int(victim.group(1)), signal.SIGKILL)
        job.wait_for(r"hostB:0 .*lost")
        # Step 7's update was never committed (the last commit was at step 6): the survivors redo it.
        job.wait_for(r"RESUMED step=6 size=2")
        code, output = job.finish()
    assert code == 0, output
    final = final_record(output)
    assert final["sizes"] == [3] * 6 + [2] * 6 and final["size"] == 2
    w, b = reference_weights(final["sizes"])
    np.testing.assert_allclose(final["w"], w, rtol=1e-10, atol=1e-12)
    assert final["b"] == pytest.approx(b, rel=1e-10, abs=1e-12)


def test_added_slot_joins_at_the_next_commit(tmp_path):
    discovery, hosts = write_discovery(tmp_path, ["hostA:2"])
    with ElasticJob("torch_elastic_train.py", discovery, "--steps", "6", "--commit-every", "1",
                    "--until-size", "3", min_np=2, max_np=3) as job:
        job.wait_for(r"RESUMED step=0 size=2")
        hosts.write_text("hostA:2\nhostB:1\n")
        job.wait_for(r"starting worker\(s\) hostB:0")
        resumed = job.wait_for(r"RESUMED step=(\d+) size=3")
        code, output = job.finish()
    assert code == 0, output
    final = final_record(output)
    joined_at = int(resumed.group(1))
    # Nothing is lost at a commit: every step ran once, at the size of its formation.
    assert final["sizes"] == [2] * joined_at + [3] * 6
    w, b = reference_weights(final["sizes"])
    np.testing.assert_allclose(final["w"], w, rtol=1e-10, atol=1e-12)


def test_below_min_np_for_longer_than_the_elastic_timeout_fails_by_name(tmp_path):
    discovery, _ = write_discovery(tmp_path, ["hostA:1", "hostB:1"])
    with ElasticJob("torch_elastic_train.py", discovery, "--steps", "12", "--commit-every", "3",
                    "--victim-rank", "1", "--victim-step", "2", min_np=2, max_np=2, elastic_timeout_s=3) as job:
        victim = job.wait_for(r"VICTIM pid=(\d+)")
        os.kill(int(victim.group(1)), signal.SIGKILL)
        code, output = job.finish()
    assert code == 3, output
    assert "ElasticTimeoutError: fewer than --min-np 2 workers (1 running) for longer than --elastic-timeout 3s" \
        in output


def test_an_error_in_the_workers_own_code_is_not_retried(tmp_path):
    discovery, _ = write_discovery(tmp_path, ["hostA:2"])
    with ElasticJob("torch_elastic_train.py", discovery, "--fail-rank", "1", min_np=2, max_np=2,
                    leading_python=True) as job:
        code, output = job.finish()
    assert code == 1, output
    assert "worker hostA:1 (rank 1 of round 1) failed in its own code: exited with code 1: " \
           "ValueError: bad batch at step 2; not retried" in output
    assert "round 2" not in output
