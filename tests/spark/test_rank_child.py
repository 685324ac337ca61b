"""A rank's child process on its own (a one-rank job, no Spark): results, failures, kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import cloudpickle
import pytest

from capture import wait_for_exit
from collective.config import Config
from spark_hvd.launch.task.rank_child import RankChild
from spark_hvd.launch.rank.rank_context import RankContext

pytestmark = pytest.mark.timeout(60)

ONE_RANK = Config(rank=0, size=1)
CONTEXT = RankContext(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1,
                      task_address="localhost:1", task_addresses=("localhost:1",), gpu_addresses=(),
                      stage_id=0, task_attempt_id=0).to_json()


def _run_child(fn, *args):
    lines: list[tuple[str, str]] = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    child = RankChild(0, env, lambda stream, text: lines.append((stream, text)))
    try:
        child.send_payload_in_background(cloudpickle.dumps((fn, args, {})))
        child.send_job(ONE_RANK, CONTEXT)
        return child.wait_outcome(exit_grace_s=10), lines
    finally:
        child.close()


def _returns_rank_and_prints():
    import collective
    import spark_hvd

    print("hello")
    collective.init()  # already initialised: a no-op, as in Horovod
    return collective.rank(), collective.size(), spark_hvd.rank_context().task_address


def _raises():
    raise KeyError("missing")


def _exits(code):
    os._exit(code)


def _forks_then_exits(code):
    import threading

    grandchild = os.fork()
    if grandchild == 0:  # holds every pipe of the child open, forever
        threading.Event().wait()
    print(f"forked {grandchild}", flush=True)
    os._exit(code)


def _leaves_work_for_the_exit(directory):
    import atexit
    import hashlib
    import sys
    import threading

    # A file the user never closes: only the exit's flush saves what is still in its buffer.
    unclosed = open(os.path.join(directory, "unclosed.txt"), "w")
    unclosed.write("buffered")
    sys.modules["__main__"].kept_open = unclosed

    def write(name):
        with open(os.path.join(directory, name), "w") as f:
            f.write(name)

    def work_then_write():
        released.wait()
        hashlib.pbkdf2_hmac("sha256", b"work", b"that outlasts fn", 200_000)  # about 0.1 s of CPU
        write("thread.txt")

    # A non-daemon thread still at work when fn returns, and an atexit handler: both run before the exit.
    released = threading.Event()
    threading.Thread(target=work_then_write).start()
    atexit.register(write, "atexit.txt")
    released.set()
    return "returned"


def test_the_exit_after_fn_keeps_what_an_interpreter_exit_keeps(tmp_path) -> None:
    """The child leaves without tearing its interpreter down, but not before what a normal exit does."""
    outcome, _ = _run_child(_leaves_work_for_the_exit, str(tmp_path))
    assert outcome.failure is None and outcome.returncode == 0
    assert cloudpickle.loads(outcome.result) == "returned"
    contents = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert contents == {"unclosed.txt": "buffered", "thread.txt": "thread.txt", "atexit.txt": "atexit.txt"}


def _imports_torch_distributed():
    import torch.distributed  # noqa: F401  (holds an object whose __class__ warns when read)

    return "imported"


def test_the_exit_after_fn_prints_nothing_of_its_own() -> None:
    """The exit's search for open files must not touch objects that warn (torch's deprecated reduce_op)."""
    outcome, lines = _run_child(_imports_torch_distributed)
    assert cloudpickle.loads(outcome.result) == "imported"
    assert lines == []


def test_the_result_comes_back_pickled_with_the_output() -> None:
    outcome, lines = _run_child(_returns_rank_and_prints)
    assert outcome.failure is None and outcome.returncode == 0
    assert cloudpickle.loads(outcome.result) == (0, 1, "localhost:1")
    assert lines == [("stdout", "hello")]


def test_an_exception_comes_back_with_its_traceback() -> None:
    outcome, _ = _run_child(_raises)
    assert outcome.result is None and outcome.returncode == 1
    assert outcome.failure.summary == "KeyError: 'missing'"
    assert "in _raises" in outcome.failure.traceback and not outcome.failure.peer_failure
    assert "child_main" not in outcome.failure.traceback  # only the user's frames


def test_an_exit_without_a_result_names_the_code() -> None:
    outcome, _ = _run_child(_exits, 7)
    assert outcome.failure.exit_code == 7
    assert outcome.failure.summary == "its process exited with code 7 before fn returned"


def test_a_grandchild_holding_the_pipes_neither_delays_the_outcome_nor_survives() -> None:
    start = time.monotonic()
    outcome, lines = _run_child(_forks_then_exits, 5)
    assert time.monotonic() - start < 5  # no drain deadline was needed
    assert outcome.failure.exit_code == 5
    [(stream, text)] = lines
    grandchild = int(text.split()[1])
    assert wait_for_exit(grandchild, 10), "the grandchild outlived the rank"


# Stands in for Spark's Python worker: starts a RankChild whose fn blocks, reports the child's
# pid, then waits to be killed.
_FAKE_TASK = """
import os, sys, threading, cloudpickle
from spark_hvd.launch.task.rank_child import RankChild
def block():
    threading.Event().wait()
env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
child = RankChild(0, env, lambda stream, text: None)
child.send_payload_in_background(cloudpickle.dumps((block, (), {})))
print(child.pid, flush=True)
threading.Event().wait()
"""


def test_the_child_dies_with_its_task_process() -> None:
    task = subprocess.Popen([sys.executable, "-c", _FAKE_TASK], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    child_pid = None
    try:
        child_pid = int(task.stdout.readline())
        task.kill()  # SIGKILL: no cleanup code runs in the task, as when Spark destroys a worker
        task.wait(10)
        assert wait_for_exit(child_pid, 10), "the child outlived its task process"
    finally:
        if task.poll() is None:
            task.kill()
            task.wait(10)
        if child_pid is not None and not wait_for_exit(child_pid, 0):
            os.kill(child_pid, signal.SIGKILL)
        task.stdout.close()


def _modules_and_pid():
    print("adopted")
    return "wave" in sys.modules, os.getpid(), os.environ.get("ADOPTED_BY")


def test_a_spare_imports_its_modules_and_relays_its_output_once_adopted():
    """What spark_hvd.run's keep_warm leaves in a worker: a child that imported the modules before any job,
    runs the job a task adopts it for, and sends that task its output (the earlier lines included)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
           "PYTHONWARNINGS": "always"}
    spare = RankChild.spare(env, ("wave", "no_such_module_here"))
    try:
        assert spare.waiting()
        lines: list[tuple[str, str]] = []
        spare.adopt(0, {**env, "ADOPTED_BY": "task 0"}, lambda stream, text: lines.append((stream, text)), None)
        spare.send_payload_in_background(cloudpickle.dumps((_modules_and_pid, (), {})))
        spare.send_job(ONE_RANK, CONTEXT)
        outcome = spare.wait_outcome(exit_grace_s=10)
    finally:
        spare.close()
    assert outcome.failure is None, outcome.failure
    # A module it could not import is skipped; the environment is the adopting task's.
    assert cloudpickle.loads(outcome.result) == (True, spare.pid, "task 0")
    assert ("stdout", "adopted") in lines
    assert not spare.waiting()


def test_a_spare_that_is_closed_unadopted_ends():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    spare = RankChild.spare(env, ("wave",))
    spare.close()
    assert not spare.waiting()


def _writes_to_the_file_its_module_opened(directory):
    import gc

    import opened_at_import

    opened_at_import.log.write("written by fn, never flushed")
    unclosed = open(os.path.join(directory, "opened_by_fn.txt"), "w")
    unclosed.write("buffered")
    sys.modules["__main__"].kept_open = unclosed
    return gc.get_freeze_count()


def test_a_spare_froze_its_imports_and_its_exit_still_flushes_their_files(tmp_path):
    """A spare moves what it imported out of the collector's sight (the exit's scan for open files then skips
    it); a file opened by one of those imports is still flushed at the exit, as one fn opened is."""
    (tmp_path / "opened_at_import.py").write_text(
        "import os\nlog = open(os.path.join(os.path.dirname(__file__), 'opened_at_import.txt'), 'w')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *(p for p in sys.path if p)])}
    spare = RankChild.spare(env, ("opened_at_import",))
    try:
        spare.adopt(0, env, lambda stream, text: None, None)
        spare.send_payload_in_background(cloudpickle.dumps((_writes_to_the_file_its_module_opened,
                                                            (str(tmp_path),), {})))
        spare.send_job(ONE_RANK, CONTEXT)
        outcome = spare.wait_outcome(exit_grace_s=10)
    finally:
        spare.close()
    assert outcome.failure is None, outcome.failure
    assert cloudpickle.loads(outcome.result) > 1000   # the interpreter's and the preload's objects
    assert (tmp_path / "opened_at_import.txt").read_text() == "written by fn, never flushed"
    assert (tmp_path / "opened_by_fn.txt").read_text() == "buffered"
