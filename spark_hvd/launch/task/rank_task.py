"""Task: the task side of one rank, in the process that owns it (a Spark task, or a local-mode task):
spawn the rank's child, hand it fn and its job, relay its output, return its result or fail."""

from __future__ import annotations

import os
import sys
import threading
import traceback
from typing import Callable, Mapping, Union

from collective.config import inherited_environ
from collective.launcher.processes import describe_exit
from spark_hvd.errors import RankFailure
from spark_hvd.launch.task.gpus import CUDA_VISIBLE_DEVICES, visible_devices
from spark_hvd.launch.task.output_channel import OutputSender
from spark_hvd.launch.task.rank_child import ChildOutcome, RankChild
from spark_hvd.launch.task.spare_child import leave_spare, spare_key, take_spare
from spark_hvd.launch.task.stage_outbox import StageOutbox
from spark_hvd.launch.task_spec import TaskSpec

# A task whose rank failed only in reaction to another's waits this long for the driver to end the job.
_PEER_FAILURE_WAIT_S = 30.0

# prepare() checks the task and returns the GPU addresses Spark gave it; meet(child, gpus, sender)
# sends the child its job once the ranks have met, and returns how the child ended.
Prepare = Callable[[], tuple[str, ...]]
Sender = Union[OutputSender, StageOutbox]
Meet = Callable[[RankChild, tuple[str, ...], Sender], ChildOutcome]


def run_task(spec: TaskSpec, rank: int, prepare: Prepare, meet: Meet, task_kind: str = "Spark task",
             outbox: StageOutbox | None = None) -> bytes:
    """Runs rank ``rank`` of the job and returns fn's pickled result; raises when it failed.

    Every failure is reported to the driver before this raises, so the driver can name it: on the
    output connection, or into ``outbox`` when the spec has no collector address (Spark Connect).
    ``task_kind`` names this process in the report of a failure of its own (not fn's).
    """
    driver_gone = threading.Event()
    child: RankChild | None = None

    def stop_child() -> None:
        driver_gone.set()
        if child is not None:
            child.kill()

    if spec.before_start is not None:
        spec.before_start(rank)
    sender: Sender
    if spec.collector_address is None:
        if outbox is None:
            raise ValueError("a task spec without a collector address needs an outbox")
        sender = outbox
    else:
        sender = OutputSender.connect(spec.collector_address, spec.secret, rank,
                                      spec.connect_timeout_s, stop_child)
    try:
        try:
            gpu_addresses = prepare()
            env = child_env(spec.env, gpu_addresses)
            key = spare_key(spec.executable, spec.env, env, spec.keep_warm)
            child = take_spare(key, rank, env, sender.send_line, sender.send_event) if spec.keep_warm else None
            if child is None:
                child = RankChild(rank, env, sender.send_line, sender.send_event, executable=spec.executable)
            child.relay_commits(sender.send_commit)
            if driver_gone.is_set():
                child.kill()
            child.send_payload_in_background(spec.payload)
            outcome = meet(child, gpu_addresses, sender)
        except Exception as e:
            # The task itself failed (not fn): report it like a rank failure, then let Spark know.
            if not driver_gone.is_set():
                sender.send_failure(RankFailure(rank, f"its {task_kind} failed: {type(e).__name__}: {e}",
                                                traceback=traceback.format_exc()))
            raise
        finally:
            if child is not None:
                child.close()
        result = _result_or_raise(outcome, sender, driver_gone)
        if spec.keep_warm:
            # Started (if not kept from an earlier job) now, when this rank's own child is gone, so its
            # imports take no CPU from training.
            leave_spare(key, spec.executable, env, spec.keep_warm)
        return result
    finally:
        sender.close()


def _result_or_raise(outcome: ChildOutcome, sender: Sender, driver_gone: threading.Event) -> bytes:
    if outcome.failure is None and outcome.result is not None and not driver_gone.is_set():
        if outcome.returncode != 0:
            # fn's result arrived, so fn succeeded: a process that then dies in interpreter
            # teardown (torch 2.13 after DDP over gloo sometimes aborts there) is not fn failing.
            sender.send_notice(f"fn returned its result; then its process ended while exiting "
                               f"({describe_exit(outcome.returncode)}); the result stands")
        return outcome.result
    if driver_gone.is_set():
        raise RuntimeError(f"spark_hvd rank {outcome.rank} stopped: the driver ended the job")
    failure = outcome.failure
    assert failure is not None
    if not outcome.reported:
        # It died without a report; reports were sent as soon as they were read (wait_outcome).
        sender.send_failure(failure)
    if failure.peer_failure and sender.driver_listening:
        # Only a reaction to another rank's failure. Ending this task now would have Spark (or
        # collective.run) stop the others, maybe before that rank's own report is out; the driver
        # ends the job once it has heard the root cause. (With a StageOutbox, every report leaves with
        # the stage's rows, so the task ends now and the driver picks the root cause from all of them.)
        driver_gone.wait(_PEER_FAILURE_WAIT_S)
    raise RuntimeError(f"spark_hvd rank {failure.rank} failed: {failure.summary}")


def child_env(run_env: Mapping[str, str], gpu_addresses: tuple[str, ...]) -> dict[str, str]:
    """A rank child's environment: this worker's, with its import path and GPUs, and the run's own ``env`` on top."""
    env = inherited_environ()
    env["PYTHONPATH"] = importable_path(env.get("PYTHONPATH"))
    env["PYTHONUNBUFFERED"] = "1"
    if gpu_addresses:
        env[CUDA_VISIBLE_DEVICES] = visible_devices(gpu_addresses, env.get(CUDA_VISIBLE_DEVICES))
    env.update(run_env)
    return env


def prestart_zygote(executable: str | None, run_env: Mapping[str, str], modules: tuple[str, ...]) -> int:
    """Starts, in this worker, the zygote that a task of a run with this ``executable``, ``env`` and ``keep_warm``
    and no GPUs would leave after its rank (and take when it starts), keyed as that task keys it; keeps the one
    there when it has that key already. Returns the zygote's pid. For a warm-up stage ahead of the run
    (zygote_warm_up.py): the zygote imports while the driver prepares the run."""
    env = child_env(run_env, ())
    return leave_spare(spare_key(executable, run_env, env, modules), executable, env, modules).pid


def importable_path(inherited: str | None) -> str:
    """A PYTHONPATH that lets a child import what this process can (e.g. files shipped with addPyFile).

    Only the entries a fresh interpreter would not find by itself: listing the interpreter's own
    stdlib or site-packages here would put site-packages ahead of the stdlib in the child.
    """
    own_roots = {os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    entries = [p for p in (inherited or "").split(os.pathsep) if p]
    for path in sys.path:
        if path and not any((os.path.realpath(path) + os.sep).startswith(root) for root in own_roots):
            entries.append(path)
    return os.pathsep.join(dict.fromkeys(entries))
