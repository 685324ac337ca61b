"""Handles returned by the ``*_async`` functions, for ``poll`` and ``synchronize``.

A handle may stand for several engine requests (a grouped allreduce) and owns the tensors those
requests read or write: the engine works on raw memory, so the tensors must outlive the requests.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any, Callable

from collective.engine import wait_all
from collective.errors import InvalidArgumentError
from collective.runtime import start_engine


@dataclass
class _Pending:
    requests: list[tuple[int, int]]        # (engine handle, dtype code its result is sized with)
    finish: Callable[[list[Any]], Any]     # engine results -> what synchronize() returns
    keep_alive: tuple[Any, ...]            # tensors whose memory the engine uses
    ready: Callable[[], bool] | None = None  # work outside the engine (CUDA streams): is it done?
    engine: Any = None                     # the engine of the requests (a process set's); None: the job's


_lock = threading.Lock()
_pending: dict[int, _Pending] = {}
_ids = itertools.count(1)


def register(requests: list[tuple[int, int]], finish: Callable[[list[Any]], Any], keep_alive: tuple[Any, ...],
             ready: Callable[[], bool] | None = None, engine: Any = None) -> int:
    with _lock:
        handle = next(_ids)
        _pending[handle] = _Pending(requests, finish, keep_alive, ready, engine)
    return handle


def poll(handle: int) -> bool:
    """True once ``synchronize(handle)`` would return without blocking."""
    pending = _pending.get(handle)
    if pending is None:
        raise InvalidArgumentError(f"unknown handle {handle} (already synchronized?)")
    if pending.ready is not None and not pending.ready():
        return False
    engine = pending.engine or start_engine()
    return all(engine.poll(request) for request, _ in pending.requests)


def synchronize(handle: int) -> Any:
    """Waits for the operation and returns its result; like Horovod, None for an unknown handle."""
    with _lock:
        pending = _pending.pop(handle, None)
    if pending is None:
        return None
    return pending.finish(wait_all(pending.engine or start_engine(), pending.requests))


def forget_all() -> None:
    """Drops every handle; called at shutdown, when the engine has failed whatever was in flight."""
    with _lock:
        _pending.clear()
