"""A keep_warm zygote on its own (no Spark): it forks fresh rank processes, reports how they end, dies with
the process that started it, and does not fork when its imports left threads running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import cloudpickle
import pytest

from capture import wait_for_exit
from collective.config import Config
from spark_hvd.launch.task.rank_child import RankChild
from spark_hvd.launch.rank.rank_context import RankContext
from spark_hvd.launch.task.zygote import Zygote

pytestmark = pytest.mark.timeout(120)

ONE_RANK = Config(rank=0, size=1)
CONTEXT = RankContext(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1,
                      task_address="localhost:1", task_addresses=("localhost:1",), gpu_addresses=(),
                      stage_id=0, task_attempt_id=0).to_json()
HERE = os.path.dirname(os.path.abspath(__file__))


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, *(p for p in sys.path if p)]), **extra}


def _run(child: RankChild, fn, *args):
    try:
        child.send_payload_in_background(cloudpickle.dumps((fn, args, {})))
        child.send_job(ONE_RANK, CONTEXT)
        return child.wait_outcome(exit_grace_s=10)
    finally:
        child.close()


def _leaves_state(marker):
    import numpy

    import collective

    seen = {"pid": os.getpid(), "parent": os.getppid(), "group": os.getpgrp(), "wave": "wave" in sys.modules,
            "markers": sorted(m for m in sys.modules if m.startswith("marker_")),
            "env": os.environ.get("ZYGOTE_TEST_MARKER"), "job": os.environ.get("ZYGOTE_TEST_JOB"),
            "draw": float(numpy.random.random()), "size": collective.size()}
    sys.modules[f"marker_{marker}"] = sys.modules["os"]
    os.environ["ZYGOTE_TEST_MARKER"] = marker
    print(f"job {marker} ran")
    return seen


def _kills_itself():
    os.kill(os.getpid(), signal.SIGKILL)


def test_each_job_gets_a_fresh_child_of_the_zygote_with_nothing_of_the_last_job():
    zygote = Zygote(_env(), ("wave", "numpy", "pyarrow"))
    try:
        # numpy's OpenBLAS pool and pyarrow's jemalloc thread do not stop it from forking.
        assert zygote.forkable()
        seen, lines = [], []
        for job in ("one", "two"):
            child = RankChild.forked(zygote, 0, _env(ZYGOTE_TEST_JOB=job), lambda s, t: lines.append((s, t)), None)
            outcome = _run(child, _leaves_state, job)
            assert outcome.failure is None and outcome.returncode == 0, outcome
            seen.append(cloudpickle.loads(outcome.result))
        assert zygote.alive()
    finally:
        zygote.close()
    one, two = seen
    assert one["parent"] == two["parent"] == zygote.pid
    assert one["pid"] != two["pid"] and one["group"] == one["pid"] and two["group"] == two["pid"]
    assert one["wave"] and two["wave"]
    assert (one["job"], two["job"]) == ("one", "two")            # each takes its own task's environment
    assert two["markers"] == [] and two["env"] is None            # nothing of job one's process
    assert one["draw"] != two["draw"]                             # numpy's generator reseeded per child
    assert ("stdout", "job one ran") in lines and ("stdout", "job two ran") in lines
    assert not zygote.alive()


def test_a_killed_child_is_reported_with_its_signal_and_the_zygote_forks_again():
    zygote = Zygote(_env(), ("wave",))
    try:
        assert zygote.forkable()
        killed = _run(RankChild.forked(zygote, 0, _env(), lambda s, t: None, None), _kills_itself)
        assert killed.returncode == -signal.SIGKILL
        assert "killed by signal SIGKILL" in killed.failure.summary, killed.failure
        again = _run(RankChild.forked(zygote, 0, _env(ZYGOTE_TEST_JOB="again"), lambda s, t: None, None),
                     _leaves_state, "again")
        assert cloudpickle.loads(again.result)["job"] == "again"
    finally:
        zygote.close()


def test_closing_the_zygote_ends_its_running_child_and_reports_it():
    zygote = Zygote(_env(), ("wave",))
    try:
        assert zygote.forkable()
        child = RankChild.forked(zygote, 0, _env(), lambda s, t: None, None)
        assert child.waiting()
        zygote.close()
        assert wait_for_exit(child.pid, 30)
        child.close()
        assert not child.waiting()
    finally:
        zygote.close()


_OWNER = textwrap.dedent("""
    import os, sys
    from spark_hvd.launch.task.rank_child import RankChild
    from spark_hvd.launch.task.zygote import Zygote
    env = {**os.environ}
    zygote = Zygote(env, ("wave",))
    assert zygote.forkable()
    child = RankChild.forked(zygote, 0, env, lambda s, t: None, None)
    print(zygote.pid, child.pid, flush=True)
    sys.stdin.read()
""")


def test_a_zygote_and_its_child_die_with_the_process_that_started_them():
    """The zygote dies with its Spark worker (PR_SET_PDEATHSIG), and a forked child with its zygote."""
    owner = subprocess.Popen([sys.executable, "-c", _OWNER], env=_env(), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        zygote_pid, child_pid = map(int, owner.stdout.readline().split())
        os.kill(owner.pid, signal.SIGKILL)
        assert wait_for_exit(zygote_pid, 30)
        assert wait_for_exit(child_pid, 30)
    finally:
        owner.kill()
        owner.wait(30)


def test_a_zygote_whose_imports_left_a_thread_is_a_plain_spare():
    zygote = Zygote(_env(), ("thread_at_import",))
    try:
        assert not zygote.forkable()
        spare = zygote.spare
        spare.adopt(0, _env(ZYGOTE_TEST_JOB="adopted"), lambda s, t: None, None)
        outcome = _run(spare, _leaves_state, "adopted")
    finally:
        zygote.close()
    seen = cloudpickle.loads(outcome.result)
    assert seen["pid"] == zygote.pid and seen["job"] == "adopted"


def _trains_a_keras_step():
    import numpy as np
    import tensorflow as tf

    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    history = model.fit(np.ones((8, 4)), np.zeros((8, 2)), epochs=1, verbose=0)
    return os.getppid(), len(history.history["loss"])


def test_a_zygote_that_imported_tensorflow_forks_children_that_train():
    """TensorFlow 2.21 starts no thread of its own at import (its pools start at the first op); the threads
    its import leaves are OpenBLAS's, which the zygote stops, and jemalloc's. So the Keras estimator's zygote
    forks, and its children run TensorFlow."""
    pytest.importorskip("tensorflow")
    zygote = Zygote(_env(), ("tensorflow", "keras", "collective.keras", "spark_hvd.keras.trainer"))
    try:
        assert zygote.forkable()
        outcome = _run(RankChild.forked(zygote, 0, _env(), lambda s, t: None, None), _trains_a_keras_step)
    finally:
        zygote.close()
    assert outcome.failure is None, outcome.failure
    assert cloudpickle.loads(outcome.result) == (zygote.pid, 1)
