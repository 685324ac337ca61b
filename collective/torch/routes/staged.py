"""The host-staged route: a device tensor's collective copied to host memory and run on the engine.

CUDA tensors take it where NCCL cannot serve them: ranks that share a GPU, or a process set (the NCCL
communicator spans the whole job, so a set's collectives run on the set's engine, whose negotiation,
fusion, join and stall checks are the set's own). The functions take what ``engine_ops``'s take and
return a handle whose result is on the tensor's device again; any tensor works, so CPU-only tests
drive this route with CPU tensors.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from collective.process_sets import ProcessSet
from collective.reduce_ops import ReduceOp
from collective.torch.routes import engine_ops
from collective.torch.routes.handles import Work, chained_work


def _through_host(tensors: Sequence[torch.Tensor], start: Callable[[list[torch.Tensor]], Work],
                  finish: Callable[[list[torch.Tensor], Any], Any]) -> Work:
    """Copies ``tensors`` to host memory and starts their engine collective; the handle's result is
    ``finish(stages, the engine result)``."""
    stages = [t.detach().to("cpu", copy=True) for t in tensors]
    inner = start(stages)
    return chained_work([inner], lambda results: finish(stages, results[0]), (stages,))


def _copied_back(targets: Sequence[torch.Tensor], single: bool) -> Callable[[list[torch.Tensor], Any], Any]:
    """The ``finish`` of an in-place collective: each stage is written back into its target; the result
    is the target (``single``) or the list of them."""
    def finish(stages: list[torch.Tensor], _result: Any) -> Any:
        with torch.no_grad():
            for target, stage in zip(targets, stages):
                target.copy_(stage)
        return targets[0] if single else list(targets)
    return finish


def _moved_to(device: torch.device) -> Callable[[list[torch.Tensor], Any], Any]:
    """The ``finish`` of an out-of-place collective: its result (a tensor, or a tuple whose first item
    is one) moves to ``device``."""
    def finish(_stages: list[torch.Tensor], result: Any) -> Any:
        if isinstance(result, tuple):
            return (result[0].to(device), *result[1:])
        return result.to(device)
    return finish


def grouped_allreduce_(tensors: Sequence[torch.Tensor], names: Sequence[str | None], op: ReduceOp,
                       prescale: float, postscale: float, process_set: ProcessSet) -> Work:
    targets = list(tensors)
    return _through_host(targets, lambda stages: engine_ops.grouped_allreduce_(stages, names, op, prescale, postscale,
                                                                               process_set),
                         _copied_back(targets, single=False))


def allreduce_(tensor: torch.Tensor, name: str | None, op: ReduceOp, prescale: float, postscale: float,
               process_set: ProcessSet) -> Work:
    # As one group of one, which is how the NCCL route reduces a lone tensor too.
    return _through_host([tensor], lambda stages: engine_ops.grouped_allreduce_(stages, [name], op, prescale,
                                                                                postscale, process_set),
                         _copied_back([tensor], single=True))


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None, process_set: ProcessSet) -> Work:
    return _through_host([tensor], lambda stages: engine_ops.broadcast_(stages[0], root_rank, name, process_set),
                         _copied_back([tensor], single=True))


def allgather(tensor: torch.Tensor, name: str | None, process_set: ProcessSet) -> Work:
    return _through_host([tensor], lambda stages: engine_ops.allgather(stages[0], name, process_set),
                         _moved_to(tensor.device))


def alltoall(tensor: torch.Tensor, splits: Any, name: str | None, process_set: ProcessSet) -> Work:
    return _through_host([tensor], lambda stages: engine_ops.alltoall(stages[0], splits, name, process_set),
                         _moved_to(tensor.device))


def reducescatter(tensor: torch.Tensor, name: str | None, op: ReduceOp, prescale: float, postscale: float,
                  process_set: ProcessSet) -> Work:
    return _through_host([tensor], lambda stages: engine_ops.reducescatter(stages[0], name, op, prescale, postscale,
                                                                           process_set),
                         _moved_to(tensor.device))
