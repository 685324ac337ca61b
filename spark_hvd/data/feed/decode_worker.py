"""Decode worker (and the rank child's side of its wire): one process of a rank's decode pool.

The rank child (decode_pool.py) starts this file as a script in a fresh interpreter, so that the worker
imports only the standard library, numpy, cloudpickle and whatever the user's ``transformation_fn``
imports itself: not ``spark_hvd``'s package (its launcher and collective), pyspark, torch or TensorFlow.
``transformation.py`` is loaded from its file for the same reason.

The wire is one pipe each way. A message is a pickle (protocol 5) whose contiguous numpy buffers travel
out of band, straight from the arrays' memory, after a small header of lengths::

    [u64 pickle length][u32 buffer count][u64 buffer length] * count  pickle  buffers...

The rank sends the job first, then ``("batch", run, seq, batch)`` messages; the worker answers each with
``("done", run, seq, batch)`` or ``("error", run, seq, report)``. The worker exits when its task pipe
closes (the rank closed the pool, or died).
"""

from __future__ import annotations

import sys

import os

_HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__" and sys.path and os.path.abspath(sys.path[0]) == _HERE:
    # Run as a script: this folder is sys.path[0], where its modules would shadow top-level names.
    del sys.path[0]

import pickle
import struct
import threading
import traceback
from typing import Any

_PREFIX = struct.Struct("<QI")
_LENGTH = struct.Struct("<Q")


def write_message(fd: int, message: Any) -> None:
    """Rank child and decode worker: send one message on ``fd`` (blocking until all of it is written)."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    views = [memoryview(data)]
    for buffer in buffers:
        views.append(buffer.raw())
    header = _PREFIX.pack(len(data), len(buffers)) + b"".join(_LENGTH.pack(v.nbytes) for v in views[1:])
    _write_all(fd, memoryview(header))
    for view in views:
        _write_all(fd, view)


def read_message(fd: int) -> Any:
    """Rank child and decode worker: the next message on ``fd``; EOFError when the writer has gone."""
    prefix = _read_exact(fd, _PREFIX.size)
    length, count = _PREFIX.unpack(prefix)
    sizes = [_LENGTH.unpack(_read_exact(fd, _LENGTH.size))[0] for _ in range(count)]
    data = _read_exact(fd, length)
    buffers = []
    for size in sizes:
        # Writable memory, so that arrays built over it are writable (torch.from_numpy warns otherwise);
        # numpy's is not zeroed first, as a bytearray would be.
        buffer = _empty(size)
        _read_into(fd, memoryview(buffer).cast("B"))
        buffers.append(buffer)
    return pickle.loads(data, buffers=buffers)


def _empty(size: int) -> Any:
    try:
        import numpy

        return numpy.empty(size, numpy.uint8)
    except ImportError:
        return bytearray(size)


def _write_all(fd: int, view: memoryview) -> None:
    view = view.cast("B")
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, size: int) -> bytearray:
    buffer = bytearray(size)
    _read_into(fd, memoryview(buffer))
    return buffer


def _read_into(fd: int, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = os.readv(fd, [view[got:]])
        if n == 0:
            raise EOFError("the other end of the pipe closed")
        got += n


def error_report(exc: BaseException, batch: dict[str, Any] | None, row: int | None) -> dict[str, Any]:
    """Decode worker: what the rank needs to re-raise ``exc`` and say where it happened."""
    import cloudpickle

    report: dict[str, Any] = {
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, _user_frames(exc.__traceback__))),
        "row": row, "path": None, "exception": None,
    }
    if batch is not None and "path" in batch:
        paths = batch["path"]
        report["path"] = str(paths[row] if row is not None and row < len(paths) else paths[0])
        report["path_of_row"] = row is not None
    try:
        pickled = cloudpickle.dumps(exc)
        pickle.loads(pickled)              # an exception whose class cannot be rebuilt goes as text
        report["exception"] = pickled
    except Exception:
        pass
    return report


def _user_frames(tb: Any) -> Any:
    """The traceback from the first frame outside this file and transformation.py (the user's code)."""
    ours = {os.path.abspath(__file__), os.path.join(_HERE, "transformation.py")}
    first = tb
    while first is not None and os.path.abspath(first.tb_frame.f_code.co_filename) in ours:
        first = first.tb_next
    return first if first is not None else tb


class _Job:
    """The user's transformation, loaded in the worker; counts rows so that an error can name its row."""

    def __init__(self, payload: bytes) -> None:
        import cloudpickle  # noqa: F401  (pickle needs it to rebuild functions pickled by value)

        self.fn, self.per_batch, self.edit_fields, self.removed_fields = pickle.loads(payload)
        self.transformation = _load_transformation()
        self.row: int | None = None

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        t = self.transformation
        if self.per_batch:
            self.row = None
            return t.apply_batch_transformation(batch, self.fn, self.edit_fields, self.removed_fields)
        self.row = -1
        return t.apply_transformation(batch, self._row_fn, self.edit_fields, self.removed_fields)

    def _row_fn(self, row: dict[str, Any]) -> Any:
        self.row += 1
        return self.fn(row)


def _load_transformation() -> Any:
    """transformation.py from its file, without importing the spark_hvd package around it."""
    import importlib.util

    path = os.path.join(_HERE, "transformation.py")
    spec = importlib.util.spec_from_file_location("_spark_hvd_decode_transformation", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serve(task_fd: int, result_fd: int) -> None:
    """Decode worker: load the job, then transform batches until the task pipe closes."""
    import queue

    setup = read_message(task_fd)
    sys.path[:] = setup["sys_path"]
    try:
        job = _Job(setup["job"])
    except BaseException as exc:  # noqa: BLE001 - the rank re-raises it
        write_message(result_fd, ("job_error", setup["run"], -1, error_report(exc, None, None)))
        return
    # A thread takes tasks off the pipe while the main thread transforms, so the rank's sends never wait
    # for a batch to finish (the rank bounds how many are in flight).
    tasks: queue.SimpleQueue = queue.SimpleQueue()

    def receive() -> None:
        try:
            while True:
                tasks.put(read_message(task_fd))
        except (EOFError, OSError):
            tasks.put(None)

    threading.Thread(target=receive, name="decode-receive", daemon=True).start()
    while (task := tasks.get()) is not None:
        _, run, seq, batch = task
        try:
            reply: tuple = ("done", run, seq, job(batch))
        except BaseException as exc:  # noqa: BLE001 - the rank re-raises it
            reply = ("error", run, seq, error_report(exc, batch, job.row))
        del batch
        write_message(result_fd, reply)


def main(argv: list[str]) -> None:
    import signal

    # Ctrl-C reaches the whole process group: the rank decides what happens, not its workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    task_fd, result_fd = int(argv[1]), int(argv[2])
    try:
        serve(task_fd, result_fd)
    except (BrokenPipeError, EOFError):
        pass                               # the rank has gone or closed the pool


if __name__ == "__main__":
    main(sys.argv)
