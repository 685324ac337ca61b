"""Allreduce of sparse (COO) tensors, as Horovod does it: every rank's indices and values are
allgathered, so the result holds every rank's entries (repeated indices add up once coalesced)."""

from __future__ import annotations

import torch

from collective.errors import InvalidArgumentError
from collective.reduce_ops import Average, ReduceOp, Sum
from collective.process_sets import ProcessSet, global_process_set, runtime_for
from collective.torch.routes.handles import Work, chained_work
from collective.torch.ops import allgather_async, resolve_op
from collective.torch.tensors import label


def _part(name: str | None, part: str) -> str | None:
    return f"{name}.{part}" if name else None


def sparse_allreduce_async(tensor: torch.Tensor, name: str | None = None, op: ReduceOp = Average,
                           process_set: ProcessSet = global_process_set) -> Work:
    """Starts reducing the sparse COO ``tensor`` across the ranks of ``process_set``; ``synchronize`` (or
    calling the handle) returns a sparse tensor of the same shape with every member's entries, their values
    divided by the set's size for Average. Only Sum and Average are sparse reductions."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise InvalidArgumentError(f"sparse_allreduce_async: tensor {label(name)} is not a sparse COO tensor")
    reduce_op = resolve_op(op, None)
    if reduce_op not in (Sum, Average):
        raise InvalidArgumentError(f"sparse_allreduce_async: tensor {label(name)}: op {reduce_op.name} is not "
                                   "supported on sparse tensors; use Sum or Average")
    # Allgather concatenates along the first dimension, so the indices travel one entry per row.
    indices = tensor._indices().t().contiguous()
    values = tensor._values()
    members = runtime_for(process_set).topology.size
    values_handle = allgather_async(values, _part(name, "values"), process_set)
    indices_handle = allgather_async(indices, _part(name, "indices"), process_set)
    shape = tensor.shape

    def finish(results: list[torch.Tensor]) -> torch.Tensor:
        gathered_values, gathered_indices = results
        if reduce_op == Average:
            gathered_values = gathered_values / members
        return torch.sparse_coo_tensor(gathered_indices.t(), gathered_values, shape)
    # Like any handle, it can be called for its result, as Horovod's sparse handle (a function) is.
    return chained_work([values_handle, indices_handle], finish, (indices, values))
