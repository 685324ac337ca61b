"""The background engine behind asynchronous collectives (the torch and TensorFlow adapters).

A request is submitted with a name and gets a handle; the native engine thread negotiates with the
other ranks, fuses small allreduces, and completes handles in the same order on every rank. ``run``
submits and waits in one step, taking and returning what the communicator's ``run`` does.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from collective import _native
from collective._native import CollectiveKind, DType, ReduceOp
from collective.auto_names import AutoNames, auto_name
from collective.config import Config
from collective.failures.notes import noting_failures
from collective.reduce_ops import scale_factors


class Engine:
    """One per process, started by ``collective.runtime.start_engine``."""

    def __init__(self, comm: Any, config: Config) -> None:
        self._native = _native.Engine(comm, config.to_native().engine)
        self._timeout_s = config.timeout_s
        self._names = AutoNames()

    @noting_failures
    def submit(
        self,
        kind: CollectiveKind,
        name: str | None,
        tensor: Any,
        dtype: DType | None = None,
        shape: Sequence[int] | None = None,
        op: ReduceOp = ReduceOp.SUM,
        root: int = -1,
        prescale: float = 1.0,
        postscale: float = 1.0,
        splits: Sequence[int] = (),
        group: int = -1,
        group_size: int = 0,
        source: Any = None,
    ) -> int:
        """Enqueues a request. ``tensor`` is a buffer, an address (then ``dtype`` and ``shape`` are
        required), or None (barrier, join). The memory must stay valid until the handle completes.
        An allreduce given ``source`` (a buffer of the same dtype and size, valid as long) reads its
        input there and only writes ``tensor``: the ring reads it in place, so nothing copies it first."""
        prescale, postscale = scale_factors(prescale, postscale)
        if name:
            return self._native.enqueue(kind, name, tensor, dtype, shape, op, int(root), prescale, postscale,
                                        list(splits), int(group), int(group_size), source)
        with self._names.next_number() as number:
            return self._native.enqueue(kind, auto_name(kind.name.lower(), number), tensor, dtype, shape, op,
                                        int(root), prescale, postscale, list(splits), int(group), int(group_size),
                                        source)

    @noting_failures
    def run(self, kind: CollectiveKind, name: str | None, tensor: Any, dtype: DType | None = None,
            shape: Sequence[int] | None = None, op: ReduceOp = ReduceOp.SUM, root: int = -1, prescale: float = 1.0,
            postscale: float = 1.0, splits: Sequence[int] = ()) -> Any:
        """Submits one request and waits for it: takes and returns what the communicator's ``run`` does.
        A call with a tensor gives its ``dtype``."""
        prescale, postscale = scale_factors(prescale, postscale)
        if name:
            return self._native.run(kind, name, tensor, dtype, shape, op, int(root), prescale, postscale,
                                    list(splits), self._timeout_s * 4)
        # In two steps, so that the number is used up only once the engine has accepted the request.
        handle = self.submit(kind, None, tensor, dtype, shape, op, root, prescale, postscale, splits)
        return self.wait(handle, DType.uint8 if dtype is None else dtype)

    def poll(self, handle: int) -> bool:
        return bool(self._native.poll(handle))

    @noting_failures
    def wait(self, handle: int, dtype: DType = DType.uint8) -> Any:
        """Blocks until done; returns None, the last joined rank, or (flat uint8 array, shape[, splits])."""
        # The engine's own deadlines (negotiation, transfers, stall shutdown) fire first; this outer one
        # only guards against a stalled tensor when the stall shutdown is off.
        return self._native.wait(handle, self._timeout_s * 4, dtype)

    @noting_failures
    def join(self) -> int:
        """Marks this rank as out of data; blocks until every rank has joined and returns the last to join."""
        # A fixed name: joining itself uses up no number. Once all have joined, every rank starts a new series.
        last = int(self.wait(self.submit(CollectiveKind.JOIN, "join", None)))
        self._names.start_series()
        return last

    def start_timeline(self, path: str, mark_cycles: bool) -> None:
        self._native.start_timeline(path, mark_cycles)

    def stop_timeline(self) -> None:
        self._native.stop_timeline()

    def shutdown(self) -> None:
        self._native.shutdown()


def wait_all(engine: Any, requests: Sequence[tuple[int, DType]]) -> list[Any]:
    """Waits for every (handle, dtype code) of ``requests`` and returns their results in order (see
    ``wait_each``). ``engine`` is any engine with ``wait`` (the native one or the MPI one)."""
    return wait_each([functools.partial(engine.wait, handle, code) for handle, code in requests])


def wait_each(waits: Sequence[Callable[[], Any]]) -> list[Any]:
    """Calls every wait in order and returns their results; waits for all of them even after one
    fails, then raises the first error: until each completes, the memory behind it may still be in use."""
    results: list[Any] = []
    error: Exception | None = None
    for wait in waits:
        try:
            results.append(wait())
        except Exception as exc:  # noqa: BLE001 - re-raised below, once nothing is in flight
            error = error or exc
            results.append(None)
    if error is not None:
        try:
            raise error
        finally:
            # The raised error's traceback holds this frame: the name would make a reference cycle, which
            # keeps the engine (and an elastic job's broken mesh) alive until a full garbage collection.
            del error
    return results
