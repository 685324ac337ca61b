"""The handle every ``*_async`` function returns, whatever route moved its tensors (c10d's ``Work``).

A handle is an ``int`` (Horovod's handles are, and scripts keep them in lists and dicts) that is also
a ``Work``: ``is_completed()`` and ``wait()`` dispatch to its route. There is one id space and one
registry, so ``poll``, ``synchronize`` and the optimizer treat an engine op, a CUDA stream op and a
composed op (host staging, a group of CUDA members, a sparse allreduce) the same way. A handle owns the
tensors its route reads or writes: the engine and NCCL work on raw memory, so those must outlive it.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Sequence

from collective.engine import wait_all
from collective.errors import InvalidArgumentError
from collective.runtime import start_engine

_lock = threading.Lock()
_pending: dict[int, "Work"] = {}
_ids = itertools.count(1)


class Work(int):
    """One collective in flight. Subclasses say how to ask (``_ready``) and how to wait (``_wait``)."""

    _finish: Callable[[Any], Any]
    _keep_alive: tuple[Any, ...]

    def __new__(cls, *_args: Any, **_kwargs: Any) -> "Work":
        with _lock:
            work = super().__new__(cls, next(_ids))
            _pending[int(work)] = work
        return work

    def _ready(self) -> bool:
        raise NotImplementedError

    def _wait(self) -> Any:
        raise NotImplementedError

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


class EngineWork(Work):
    """Requests on a background engine (the job's, a process set's, or the MPI backend's)."""

    def __init__(self, engine: Any, requests: list[tuple[int, int]], finish: Callable[[list[Any]], Any],
                 keep_alive: tuple[Any, ...]) -> None:
        self._engine = engine
        self._requests = requests  # (engine handle, dtype code its result is sized with)
        self._finish = finish
        self._keep_alive = keep_alive

    def _ready(self) -> bool:
        return all(self._engine.poll(request) for request, _ in self._requests)

    def _wait(self) -> list[Any]:
        return wait_all(self._engine, self._requests)


class EventWork(Work):
    """Work queued on a stream, done when an event recorded after it is (a ``torch.cuda.Event``)."""

    def __init__(self, event: Any, finish: Callable[[None], Any], keep_alive: tuple[Any, ...]) -> None:
        self._event = event
        self._finish = finish
        self._keep_alive = keep_alive

    def _ready(self) -> bool:
        return bool(self._event.query())

    def _wait(self) -> None:
        self._event.synchronize()


class ChainedWork(Work):
    """Work made of other handles: done when they all are; ``finish`` takes their results in order."""

    def __init__(self, parts: Sequence[Work], finish: Callable[[list[Any]], Any],
                 keep_alive: tuple[Any, ...] = ()) -> None:
        self._parts = list(parts)
        self._finish = finish
        self._keep_alive = keep_alive

    def _ready(self) -> bool:
        return all(poll(part) for part in self._parts)

    def _wait(self) -> list[Any]:
        # Every part is waited for before the first error is raised: until then its memory is in use.
        results: list[Any] = []
        error: Exception | None = None
        for part in self._parts:
            try:
                results.append(synchronize(part))
            except Exception as exc:  # noqa: BLE001 - re-raised below, once nothing is in flight
                error = error or exc
                results.append(None)
        if error is not None:
            raise error
        return results


def engine_work(requests: list[tuple[int, int]], finish: Callable[[list[Any]], Any], keep_alive: tuple[Any, ...],
                engine: Any = None) -> EngineWork:
    """A handle for ``requests`` on ``engine`` (None: the job's engine, started if it was not)."""
    return EngineWork(engine or start_engine(), requests, finish, keep_alive)


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
