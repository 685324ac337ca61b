"""The handle every ``*_async`` function returns, whatever route moved its tensors (c10d's ``Work``).

A handle is an ``int`` (Horovod's handles are, and scripts keep them in lists and dicts) that is also
a ``Work``: ``is_completed()`` and ``wait()`` call its route's (``engine_work``, ``event_work``,
``chained_work``). There is one id space and one registry, so ``poll``, ``synchronize`` and the
optimizer treat an engine op, a CUDA stream op and a composed op (host staging, a group of CUDA
members, a sparse allreduce) the same way. A handle owns the
tensors its route reads or writes: the engine and NCCL work on raw memory, so those must outlive it.
"""

from __future__ import annotations

import functools
import itertools
import threading
from typing import Any, Callable, Sequence

from collective.engine import wait_all, wait_each
from collective.errors import InvalidArgumentError

_lock = threading.Lock()
_pending: dict[int, "Work"] = {}
_ids = itertools.count(1)


class Work(int):
    """One collective in flight: ``ready`` and ``wait`` are its route's, ``finish`` turns what ``wait``
    returns into the result."""

    def __new__(cls, ready: Callable[[], bool], wait: Callable[[], Any], finish: Callable[[Any], Any],
                keep_alive: tuple[Any, ...]) -> "Work":
        with _lock:
            work = super().__new__(cls, next(_ids))
            work._ready, work._wait, work._finish, work._keep_alive = ready, wait, finish, keep_alive
            _pending[int(work)] = work
        return work

    def is_completed(self) -> bool:
        """True once ``wait()`` would return without blocking (``poll``)."""
        return self._ready()

    def wait(self) -> Any:
        """Waits and returns the result, once; later calls return None, as Horovod's ``synchronize``."""
        with _lock:
            if _pending.pop(int(self), None) is None:
                return None
        return self._finish(self._wait())

    def __call__(self) -> Any:
        # Horovod's sparse allreduce hands back a function that returns the result; any handle can be called.
        return self.wait()


def engine_work(engine: Any, requests: list[tuple[int, int]], finish: Callable[[list[Any]], Any],
                keep_alive: tuple[Any, ...]) -> Work:
    """Requests on a background engine (the job's, a process set's, or the MPI backend's); ``requests``
    are (engine handle, dtype code its result is sized with)."""
    return Work(lambda: all(engine.poll(request) for request, _ in requests), lambda: wait_all(engine, requests),
                finish, keep_alive)


def event_work(event: Any, finish: Callable[[None], Any], keep_alive: tuple[Any, ...]) -> Work:
    """Work queued on a stream, done when an event recorded after it is (a ``torch.cuda.Event``)."""
    return Work(lambda: bool(event.query()), event.synchronize, finish, keep_alive)


def chained_work(parts: Sequence[Work], finish: Callable[[list[Any]], Any], keep_alive: tuple[Any, ...] = ()) -> Work:
    """Work made of other handles: done when they all are; ``finish`` takes their results in order.
    Every part is waited for before the first error is raised: until then its memory is in use."""
    parts = list(parts)
    return Work(lambda: all(poll(part) for part in parts),
                lambda: wait_each([functools.partial(synchronize, part) for part in parts]), finish, keep_alive)


def _work(handle: int) -> Work | None:
    with _lock:
        return _pending.get(int(handle))


def poll(handle: int) -> bool:
    """True once ``synchronize(handle)`` would return without blocking."""
    work = _work(handle)
    if work is None:
        raise InvalidArgumentError(f"unknown handle {handle} (already synchronized?)")
    return work.is_completed()


def synchronize(handle: int) -> Any:
    """Waits for the operation and returns its result; like Horovod, None for an unknown handle."""
    work = _work(handle)
    return None if work is None else work.wait()


def forget_all() -> None:
    """Drops every handle; called at shutdown, when the engine has failed whatever was in flight."""
    with _lock:
        _pending.clear()
