"""Rank child: the process that runs fn, ``python -m spark_hvd.launch.rank.child_main LAUNCH_FD RESULT_FD``.

User code runs here rather than in Spark's Python worker, so a crash, ``os._exit`` or a leaked
thread in ``fn`` cannot take the worker down. The task (our parent) sends two frames on LAUNCH_FD:

1. ``{"kind": "payload"}`` + cloudpickle((fn, args, kwargs)), right after spawning us, so that
   unpickling (which imports the user's modules, maybe torch) overlaps the ranks' allGather;
   a spare child (spare_child.py) gets ``{"kind": "preload", "modules": [...]}`` first, imports those
   and waits (at most _SPARE_IDLE_S) for a task to adopt it: ``{"kind": "env", "env": {...}}`` (the
   task's environment, which becomes ours) and the payload; with ``"zygote": FD`` (a control socket) it
   forks instead, when that is safe, a fresh child per job, and each child goes on from the wait on its
   own pipes (zygote/fork.py);
2. ``{"kind": "job", "context": {...}}`` + pickle(Config) once the ranks have met.

While fn runs we may send ``{"kind": "event", "data": {...}}`` frames on RESULT_FD
(``spark_hvd.emit_event``); we end with one report frame: ``{"ok": true}`` + cloudpickle(fn's
return value), or ``{"ok": false, ...}`` with the fields of a FailureReport (collective.failures.report).
"""

from __future__ import annotations

import atexit
import dataclasses
import gc
import importlib
import io
import os
import pickle
import select
import socket
import sys
import threading
import traceback
import weakref
from typing import Any, BinaryIO, NoReturn

import cloudpickle

import collective
from collective.failures.notes import as_noted_reaction
from collective.failures.report import FailureReport
from spark_hvd.launch.rank import rank_events
from spark_hvd.launch.zygote import fork as zygote_fork
from spark_hvd.launch.framing import read_frame, write_frame
from spark_hvd.launch.rank.rank_context import RankContext, set_rank_context

# A spare nobody adopts within this long exits: its worker runs no more jobs of the kind it was made for.
_SPARE_IDLE_S = 600.0

# fn's exception travels in its failure report (JSON, base64) only when smaller than this.
_MAX_PICKLED_EXCEPTION_BYTES = 64 << 10


def main(argv: list[str]) -> int:
    launch = os.fdopen(int(argv[1]), "rb")
    results = os.fdopen(int(argv[2]), "wb")
    stage = "receiving fn"
    own_rank: int | None = None
    try:
        frame = read_frame(launch)
        if frame is not None and frame[0].get("kind") == "preload":
            _preload(frame[0].get("modules") or [])
            _freeze_imports()
            if frame[0].get("zygote") is not None:
                launch, results = _fork_or_wait(launch, results, int(frame[0]["zygote"]))
            if not select.select([launch], [], [], _SPARE_IDLE_S)[0]:
                os._exit(0)          # never adopted; nothing ran here
            frame = read_frame(launch)
            if frame is not None and frame[0].get("kind") == "env":
                # The adopting task's environment: the worker's may have changed since we started.
                os.environ.clear()
                os.environ.update(frame[0]["env"])
                frame = read_frame(launch)
        fn, args, kwargs = cloudpickle.loads(_expect_frame(frame, "payload")[1])
        stage = "receiving the job"
        job, config_blob = _expect(launch, "job")
        launch.close()
        config = pickle.loads(config_blob)
        context = RankContext.from_json(job["context"])
        own_rank = context.rank
        set_rank_context(context)
        stage = "collective.init()"
        # fn may call collective.init() again: without arguments that keeps this job (as in Horovod).
        collective.init(config)
        stage = "fn"
        rank_events.attach(results)
        value = fn(*args, **kwargs)
        stage = "pickling fn's return value"
        blob = cloudpickle.dumps(value)
    except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt in fn are failures too
        rank_events.detach()
        _flush_stdio()
        # fn may have caught a peer's failure and raised or exited otherwise: the peer stays the root cause.
        report = as_noted_reaction(FailureReport.from_exception(
            e, own_rank, None if stage == "fn" else stage, traceback=_traceback_text(e, skip_own_frame=stage == "fn")))
        if stage == "fn":
            report = dataclasses.replace(report, exception=_pickled_exception(e))
        write_frame(results, {"ok": False, **report.to_wire()})
        results.close()
        return 1
    # Leave the mesh before reporting success, so peers see a goodbye, never a vanished rank.
    collective.shutdown()
    rank_events.detach()
    _flush_stdio()
    write_frame(results, {"ok": True}, blob)
    results.close()
    _exit_without_teardown()


def _pickled_exception(error: BaseException) -> bytes | None:
    """fn's exception for the driver to raise as the user's own (run_elastic, when retries run out); None when
    it does not pickle or is too large to travel in a failure report."""
    try:
        blob = cloudpickle.dumps(error)
    except Exception:  # noqa: BLE001 - any exception may hold what pickling refuses; the report still goes
        return None
    return blob if len(blob) <= _MAX_PICKLED_EXCEPTION_BYTES else None


def _fork_or_wait(launch: BinaryIO, results: BinaryIO, control_fd: int) -> tuple[BinaryIO, BinaryIO]:
    """As a zygote (zygote/fork.py), returns only in a forked child, with that child's own launch and result
    pipes; a process that cannot fork safely goes on as a plain spare, on its own pipes."""
    _flush_stdio()    # what the imports printed must not reach every forked child's output again
    forked = zygote_fork.serve(socket.socket(fileno=control_fd), _SPARE_IDLE_S)
    if forked is None:
        return launch, results
    for own in (launch, results):   # the zygote's pipes, which its task reads and writes
        own.close()
    return os.fdopen(forked[0], "rb"), os.fdopen(forked[1], "wb")


def _exit_without_teardown() -> NoReturn:
    """Ends the process as the interpreter's own exit would, minus tearing down its modules.

    Tearing down an interpreter that imported torch or TensorFlow takes from 0.3 s to over a second,
    and the task waits for our exit before its Spark task returns. Everything a user can observe of an
    exit happens before that teardown, so it happens here too, in CPython's order: non-daemon threads
    are joined, atexit handlers run (logging, multiprocessing, the user's own), and every file still open
    is flushed, as its finalizer would have done.
    """
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon and thread.is_alive():
            thread.join()
    atexit._run_exitfuncs()
    _flush_open_files()
    _flush_stdio()
    os._exit(0)


def _flush_open_files() -> None:
    # Text layers first: they hand their characters to the binary buffers flushed after them.
    open_files = [*_open_files(), *_files_frozen]
    open_files.sort(key=lambda f: not isinstance(f, io.TextIOWrapper))
    for stream in open_files:
        try:
            if not stream.closed and stream.writable():
                stream.flush()
        except (OSError, ValueError):
            pass  # A broken pipe or a detached buffer: nothing left to save.


_WRITABLE_FILE_TYPES = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom)
# The files among the objects _freeze_imports() took out of the collector's sight (gc.get_objects skips them).
_files_frozen: "weakref.WeakSet[Any]" = weakref.WeakSet()


def _open_files() -> list[Any]:
    # type(), not isinstance(): isinstance reads __class__, which some objects turn into a property that
    # warns (torch's deprecated torch.distributed.reduce_op printed a FutureWarning at every rank's exit).
    return [obj for obj in gc.get_objects() if type(obj) in _WRITABLE_FILE_TYPES]


def _freeze_imports() -> None:
    """Moves every object alive now (what the preload imported: torch alone is some 300,000) out of the
    collector's generations, while a spare waits for its job. The exit's scan for open files then walks only
    what the job made (it took 0.4 to 0.8 s after a fit on a loaded machine, with the task waiting), and
    the collector's full passes during fn skip the frameworks' objects. The files among them are kept
    (weakly), so the exit still flushes them."""
    gc.collect()
    _files_frozen.update(_open_files())
    gc.freeze()


def _preload(modules: list[str]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the job that needs it will fail on it, with its own report
            pass


def _expect(stream: BinaryIO, kind: str) -> tuple[dict[str, Any], bytes]:
    return _expect_frame(read_frame(stream), kind)


def _expect_frame(frame: tuple[dict[str, Any], bytes] | None, kind: str) -> tuple[dict[str, Any], bytes]:
    if frame is None or frame[0].get("kind") != kind:
        raise ConnectionError(f"the task sent {frame[0] if frame else 'nothing'} instead of the {kind}")
    return frame


def _traceback_text(error: BaseException, skip_own_frame: bool) -> str:
    # The user wants to see their fn's frames, not this module's call into it.
    tb = error.__traceback__
    if skip_own_frame and tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))


def _flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))
