"""The engine route: collectives on host tensors, run by the background engine of a process set.

Tensors are handed to the engine by address (``data_ptr``), so contiguous inputs are never copied.
In-place functions on a non-contiguous tensor work on a contiguous copy and write it back when the
handle is synchronized. Arguments arrive resolved (a ``ReduceOp``, a global ``root_rank``): this module
moves tensors; ``collective.torch.ops`` reads Horovod's arguments and picks the route.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from collective._native import CollectiveKind
from collective.errors import InvalidArgumentError
from collective.grouped import Member, submit_group
from collective.process_sets import ProcessSet, runtime_for, set_rank_of
from collective.reduce_ops import ReduceOp
from collective.runtime import start_engine
from collective.torch.routes.handles import Work, engine_work
from collective.torch.tensors import check_tensor, contiguous_input, from_flat, split_list


def _engine(process_set: ProcessSet) -> Any:
    """The engine of ``process_set`` (the job's for the global set), started if it was not."""
    return start_engine(runtime_for(process_set))


def _member(name: str | None, tensor: torch.Tensor, code: int) -> Member:
    if tensor.device.type != "cpu":  # the engine reads host memory; CUDA tensors take another route
        raise InvalidArgumentError(f"{name!r}: the engine cannot take a tensor on {tensor.device}")
    return Member(name, tensor.data_ptr(), code, list(tensor.shape))


def _submit(engine: Any, kind: int, name: str | None, tensor: torch.Tensor, code: int, **options: Any) -> int:
    member = _member(name, tensor, code)
    return engine.submit(kind, name, member.tensor, dtype=code, shape=member.shape, **options)


def _writable(tensor: torch.Tensor) -> torch.Tensor:
    """The memory an in-place op may write: the tensor's own, or a contiguous copy to write back."""
    return tensor.detach() if tensor.is_contiguous() else tensor.detach().contiguous()


def _in_place(engine: Any, targets: list[torch.Tensor], works: list[torch.Tensor], requests: list[tuple[int, int]],
              result: Callable[[], Any]) -> Work:
    def finish(_results: list[Any]) -> Any:
        with torch.no_grad():
            for target, work in zip(targets, works):
                if work.data_ptr() != target.data_ptr():  # a contiguous copy stood in for the target
                    target.copy_(work)
        return result()
    return engine_work(engine, requests, finish, (targets, works))


def _single(kind: int, tensor: torch.Tensor, name: str | None, process_set: ProcessSet,
            finish: Callable[[Any, torch.dtype], Any], **options: Any) -> Work:
    """One out-of-place request whose result ``finish(engine result, dtype)`` makes the handle's."""
    code = check_tensor(tensor, name)
    work = contiguous_input(tensor)
    engine = _engine(process_set)
    request = _submit(engine, kind, name, work, code, **options)
    dtype = tensor.dtype
    return engine_work(engine, [(request, code)], lambda results: finish(results[0], dtype), (work,))


def _group(kind: int, tensors: Sequence[torch.Tensor], names: Sequence[str | None], process_set: ProcessSet,
           **options: Any) -> Work:
    """One out-of-place group, negotiated as a unit; the handle's result is the list of new tensors."""
    codes = [check_tensor(t, n) for t, n in zip(tensors, names)]
    works = [contiguous_input(t) for t in tensors]
    engine = _engine(process_set)
    requests = submit_group(engine, kind, [_member(n, w, c) for w, n, c in zip(works, names, codes)], **options)
    dtypes = [t.dtype for t in tensors]
    return engine_work(engine, requests, lambda results: [from_flat(*r, d) for r, d in zip(results, dtypes)],
                      tuple(works))


def allreduce_(tensor: torch.Tensor, name: str | None, op: ReduceOp, prescale: float, postscale: float,
               process_set: ProcessSet) -> Work:
    """In place; the handle's result is ``tensor``."""
    code = check_tensor(tensor, name)
    work = _writable(tensor)
    engine = _engine(process_set)
    request = _submit(engine, CollectiveKind.ALLREDUCE, name, work, code, op=op, prescale=prescale,
                      postscale=postscale)
    return _in_place(engine, [tensor], [work], [(request, code)], lambda: tensor)


def allreduce(tensor: torch.Tensor, name: str | None, op: ReduceOp, prescale: float, postscale: float,
              process_set: ProcessSet) -> Work:
    """Out of place, for a contiguous ``tensor``: the engine reads it where it is and writes only the
    new tensor (no copy first)."""
    code = check_tensor(tensor, name)
    source = tensor.detach()
    output = torch.empty_like(source, memory_format=torch.contiguous_format)
    engine = _engine(process_set)
    request = _submit(engine, CollectiveKind.ALLREDUCE, name, output, code, op=op, prescale=prescale,
                      postscale=postscale, source=source.data_ptr())
    return engine_work(engine, [(request, code)], lambda _results: output, (source, output))


def grouped_allreduce_(tensors: Sequence[torch.Tensor], names: Sequence[str | None], op: ReduceOp,
                       prescale: float, postscale: float, process_set: ProcessSet) -> Work:
    """In place, as one group the engine negotiates and fuses as a unit; the result is the list."""
    targets = list(tensors)
    codes = [check_tensor(t, n) for t, n in zip(targets, names)]
    works = [_writable(t) for t in targets]
    engine = _engine(process_set)
    requests = submit_group(engine, CollectiveKind.ALLREDUCE, [_member(n, w, c) for w, n, c in zip(works, names, codes)],
                            op=op, prescale=prescale, postscale=postscale)
    return _in_place(engine, targets, works, requests, lambda: targets)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None, process_set: ProcessSet) -> Work:
    """In place; ``root_rank`` is a global rank, also on a process set (as in Horovod)."""
    code = check_tensor(tensor, name)
    work = _writable(tensor)
    runtime = runtime_for(process_set)
    root = set_rank_of(runtime, root_rank, "root_rank")
    engine = start_engine(runtime)
    request = _submit(engine, CollectiveKind.BROADCAST, name, work, code, root=root)
    return _in_place(engine, [tensor], [work], [(request, code)], lambda: tensor)


def allgather(tensor: torch.Tensor, name: str | None, process_set: ProcessSet) -> Work:
    return _single(CollectiveKind.ALLGATHER, tensor, name, process_set, lambda r, dtype: from_flat(*r, dtype))


def grouped_allgather(tensors: Sequence[torch.Tensor], names: Sequence[str | None], process_set: ProcessSet) -> Work:
    return _group(CollectiveKind.ALLGATHER, tensors, names, process_set)


def alltoall(tensor: torch.Tensor, splits: Any, name: str | None, process_set: ProcessSet) -> Work:
    """The result is ``(output, received_splits)``, received_splits an int32 tensor, as Horovod's."""
    rows = [] if splits is None else split_list(splits, name)  # the engine divides evenly, as its op's rule says

    def finish(result: Any, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        flat, shape, received = result
        return from_flat(flat, shape, dtype), torch.tensor(received, dtype=torch.int32)
    return _single(CollectiveKind.ALLTOALL, tensor, name, process_set, finish, splits=rows)


def reducescatter(tensor: torch.Tensor, name: str | None, op: ReduceOp, prescale: float, postscale: float,
                  process_set: ProcessSet) -> Work:
    return _single(CollectiveKind.REDUCESCATTER, tensor, name, process_set, lambda r, dtype: from_flat(*r, dtype),
                   op=op, prescale=prescale, postscale=postscale)


def grouped_reducescatter(tensors: Sequence[torch.Tensor], names: Sequence[str | None], op: ReduceOp,
                          prescale: float, postscale: float, process_set: ProcessSet) -> Work:
    return _group(CollectiveKind.REDUCESCATTER, tensors, names, process_set, op=op, prescale=prescale,
                  postscale=postscale)


def join(process_set: ProcessSet) -> int:
    """Blocks until every rank of the set has joined; the set rank that joined last."""
    return _engine(process_set).join()


def barrier(process_set: ProcessSet) -> None:
    engine = _engine(process_set)
    engine.wait(engine.submit(CollectiveKind.BARRIER, None, None))
