"""Collectives on lists of numpy arrays through the background engine: submit every request, then wait.

This is the framework-agnostic half of the TensorFlow bridge. Submitting a whole list before waiting
lets the engine negotiate the requests in one cycle and fuse the small allreduces, which one blocking
call per array would prevent.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from collective._native import CollectiveKind
from collective.dtypes import as_buffer, dtype_code, split_counts
from collective.engine import Engine, wait_all
from collective.errors import InvalidArgumentError
from collective.grouped import groups_by_dtype
from collective.process_sets import ProcessSet, global_rank_of, runtime_for
from collective.reduce_ops import ReduceOp
from collective.runtime import start_engine

TENSOR_ALIGNMENT = 64
# Arrays of a batch that failed part-way through submitting: the engine may still write into them.
_stranded: list[Any] = []

# submit(engine, index in the batch, buffer, name, dtype code) -> engine handle
Submit = Callable[[Engine, int, np.ndarray, "str | None", int], int]


def _label(name: str | None) -> str:
    return name or "(unnamed)"


def _engine(process_set: ProcessSet | None) -> Engine:
    """The engine that runs collectives on ``process_set`` (None: the whole job), started if need be."""
    return start_engine(runtime_for(process_set))


@dataclass
class InFlight:
    """Requests submitted and not yet waited for, with the arrays the engine reads and writes."""
    engine: Engine
    requests: list[tuple[int, int]]
    arrays: Sequence[np.ndarray]
    sources: Sequence[np.ndarray] = ()  # out-of-place inputs, which the engine reads until completion

    def wait(self) -> list[Any]:
        """Waits for every request; returns the engine's results in order."""
        return wait_all(self.engine, self.requests)


def _submit_all(arrays: Sequence[np.ndarray], names: Sequence[str | None], submit: Submit,
                process_set: ProcessSet | None) -> InFlight:
    """Submits a request for every array without waiting."""
    codes = [dtype_code(a.dtype, _label(n)) for a, n in zip(arrays, names)]  # all checked before any submit
    engine = _engine(process_set)
    requests: list[tuple[int, int]] = []
    try:
        for index, (array, name, code) in enumerate(zip(arrays, names, codes)):
            requests.append((submit(engine, index, as_buffer(array, code), name, code), code))
    except Exception:
        _stranded.append(arrays)
        raise
    return InFlight(engine, requests, arrays)


def _run(arrays: Sequence[np.ndarray], names: Sequence[str | None], submit: Submit,
         process_set: ProcessSet | None) -> list[Any]:
    """Submits a request for every array, then waits for all of them; returns the engine's results."""
    return _submit_all(arrays, names, submit, process_set).wait()


def aligned_empty(shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """A C-contiguous array whose data starts on a 64-byte boundary: TensorFlow kernels require that
    alignment of any buffer a tensor wraps without copying (numpy guarantees only 16)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + TENSOR_ALIGNMENT, np.uint8)
    offset = -raw.ctypes.data % TENSOR_ALIGNMENT
    return raw[offset:offset + nbytes].view(dtype).reshape(tuple(shape))


def aligned_copy(array: np.ndarray) -> np.ndarray:
    """A copy of ``array`` in an ``aligned_empty`` array."""
    out = aligned_empty(array.shape, array.dtype)
    out[...] = array
    return out


def reused_buffer(like: np.ndarray, pool: dict[str, np.ndarray], key: str) -> np.ndarray:
    """An ``aligned_empty`` array shaped as ``like``: the one ``pool`` keeps under ``key`` when nothing
    else holds it any more. A result tensor wraps its buffer without copying and keeps it alive, so a
    buffer that only the pool references is free; a fresh one (then kept) costs page faults that a step
    with megabytes of gradients pays again at every step."""
    held = pool.get(key)
    # Three references when free: the pool's, ``held`` and getrefcount's own argument.
    if held is not None and held.shape == like.shape and held.dtype == like.dtype and sys.getrefcount(held) == 3:
        return held
    pool[key] = fresh = aligned_empty(like.shape, like.dtype)
    return fresh


def _writable_copies(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Arrays the engine may reduce into. A view of a TensorFlow tensor's memory (a DLPack view, or
    anything not owning its data) is copied; an array that owns its data (a bfloat16 tensor's
    ``.numpy()`` is a private copy) is used as it is."""
    return [a if a.flags.owndata and a.flags.writeable and a.flags.c_contiguous else aligned_copy(a) for a in arrays]


def _readable(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in arrays]


def _shaped(flat: np.ndarray, shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    return flat.view(dtype).reshape(tuple(shape))


def _rows(array: np.ndarray, name: str | None, what: str) -> int:
    if array.ndim == 0:
        raise InvalidArgumentError(f"{what} {_label(name)!r} needs a tensor with at least one dimension")
    return int(array.shape[0])


def allreduce(arrays: Sequence[np.ndarray], names: Sequence[str | None], op: ReduceOp, prescale: float = 1.0,
              postscale: float = 1.0, grouped: bool = False, process_set: ProcessSet | None = None
              ) -> list[np.ndarray]:
    """Returns every array reduced across ranks. ``grouped`` negotiates and fuses each dtype's arrays
    as one unit (Horovod's grouped_allreduce); otherwise the engine fuses as it sees fit."""
    in_flight = start_allreduce(arrays, names, op, prescale, postscale, grouped, process_set)
    in_flight.wait()
    return list(in_flight.arrays)


def start_allreduce(arrays: Sequence[np.ndarray], names: Sequence[str | None], op: ReduceOp, prescale: float = 1.0,
                    postscale: float = 1.0, grouped: bool = False, process_set: ProcessSet | None = None,
                    outputs: Sequence[np.ndarray] | None = None) -> InFlight:
    """``allreduce`` without the wait: the reduced values are in ``.arrays`` once ``.wait()`` returns.

    An array this process owns (writable, C-contiguous: a bfloat16 tensor's private copy) is reduced in
    place. Any other (a read-only view of a TensorFlow tensor) is read where it is, out of place, into
    ``outputs[i]`` when given (writable, C-contiguous, its shape and dtype), else into a new aligned
    array, so that no copy of the input precedes the allreduce; the views are kept with the requests,
    since the engine reads them until each completes."""
    placed = [_placed(a, None if outputs is None else outputs[i]) for i, a in enumerate(arrays)]
    group_of: list[tuple[int, int]] = [(-1, 0)] * len(placed)
    if grouped:
        group_of = groups_by_dtype([a.dtype for a, _ in placed])

    def submit(engine: Engine, index: int, buffer: np.ndarray, name: str | None, code: int) -> int:
        group, group_size = group_of[index]
        source = placed[index][1]
        return engine.submit(CollectiveKind.ALLREDUCE, name, buffer, code, op=op, prescale=prescale, postscale=postscale,
                             group=group, group_size=group_size,
                             source=None if source is None else as_buffer(source, code))
    in_flight = _submit_all([result for result, _ in placed], names, submit, process_set)
    in_flight.sources = [source for _, source in placed if source is not None]
    return in_flight


def _placed(array: np.ndarray, output: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Where an allreduce of ``array`` writes its result, and where it reads its input when that is
    elsewhere (None: in place)."""
    if not array.flags.c_contiguous:
        return aligned_copy(array), None
    if output is not None:
        return output, array
    if array.flags.owndata and array.flags.writeable:
        return array, None
    return aligned_empty(array.shape, array.dtype), array


def broadcast(arrays: Sequence[np.ndarray], names: Sequence[str | None], root_rank: int,
              process_set: ProcessSet | None = None) -> list[np.ndarray]:
    """Returns ``root_rank``'s value of every array (``root_rank`` counted within ``process_set``)."""
    works = _writable_copies(arrays)

    def submit(engine: Engine, index: int, buffer: np.ndarray, name: str | None, code: int) -> int:
        return engine.submit(CollectiveKind.BROADCAST, name, buffer, code, root=int(root_rank))
    _run(works, names, submit, process_set)
    return works


def allgather(arrays: Sequence[np.ndarray], names: Sequence[str | None],
              process_set: ProcessSet | None = None) -> list[np.ndarray]:
    """Concatenates every rank's arrays along the first dimension, in rank order (first dims may differ)."""
    inputs = _readable(arrays)
    for array, name in zip(inputs, names):
        _rows(array, name, "allgather")

    def submit(engine: Engine, index: int, buffer: np.ndarray, name: str | None, code: int) -> int:
        return engine.submit(CollectiveKind.ALLGATHER, name, buffer, code)
    results = _run(inputs, names, submit, process_set)
    return [_shaped(flat, shape, a.dtype) for (flat, shape), a in zip(results, inputs)]


def alltoall(array: np.ndarray, splits: Sequence[int] | None, name: str | None,
             process_set: ProcessSet | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Sends ``splits[i]`` rows to rank i (the first dimension split evenly when None); returns the
    received rows and how many came from each rank."""
    (work,) = _readable([array])
    _rows(work, name, "alltoall")
    # None: the engine divides the first dimension evenly, by the alltoall op's own rule.
    split_list = [] if splits is None else split_counts(splits, _label(name))

    def submit(engine: Engine, index: int, buffer: np.ndarray, name: str | None, code: int) -> int:
        return engine.submit(CollectiveKind.ALLTOALL, name, buffer, code, splits=split_list)
    ((flat, shape, received),) = _run([work], [name], submit, process_set)
    return _shaped(flat, shape, work.dtype), np.asarray(received, dtype=np.int32)


def reducescatter(arrays: Sequence[np.ndarray], names: Sequence[str | None], op: ReduceOp, prescale: float = 1.0,
                  postscale: float = 1.0, process_set: ProcessSet | None = None) -> list[np.ndarray]:
    """Reduces every array across ranks; this rank gets its share of each first dimension (the first
    ``rows % size`` ranks get one row more)."""
    inputs = _readable(arrays)
    for array, name in zip(inputs, names):
        _rows(array, name, "reducescatter")

    def submit(engine: Engine, index: int, buffer: np.ndarray, name: str | None, code: int) -> int:
        return engine.submit(CollectiveKind.REDUCESCATTER, name, buffer, code, op=op, prescale=prescale, postscale=postscale)
    results = _run(inputs, names, submit, process_set)
    return [_shaped(flat, shape, a.dtype) for (flat, shape), a in zip(results, inputs)]


def barrier(process_set: ProcessSet | None = None) -> None:
    engine = _engine(process_set)
    engine.wait(engine.submit(CollectiveKind.BARRIER, None, None))


def join(process_set: ProcessSet | None = None) -> int:
    """Marks this rank as out of data (it contributes zeros to others' allreduces until all have joined);
    returns the (global) rank that joined last."""
    return global_rank_of(runtime_for(process_set), _engine(process_set).join())
