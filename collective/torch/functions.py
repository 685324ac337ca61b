"""Helpers that make every rank start from the same place: parameters, optimizer state, objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import cloudpickle
import torch

from collective.process_sets import ProcessSet, global_process_set
from collective.runtime import rank
from collective.torch.ops import allgather_async, broadcast_, broadcast_async_, synchronize
from collective.torch.optimizer import local_step
from collective.torch.tensors import ENGINE_DTYPES


def broadcast_parameters(params: Any, root_rank: int) -> None:
    """Overwrites parameters on every rank with ``root_rank``'s, in place.

    ``params`` is a ``state_dict()``, ``named_parameters()`` or ``parameters()`` (a list or any iterable).
    """
    if isinstance(params, dict):
        named = sorted(params.items())
    elif isinstance(params, Iterable) and not isinstance(params, (str, bytes, torch.Tensor)):
        named = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(
            f"broadcast_parameters needs a state_dict or a list of parameters, got {type(params).__name__}")
    # All broadcasts in flight at once, so the engine can negotiate them together.
    handles = [broadcast_async_(tensor, root_rank, name) for name, tensor in named]
    for handle in handles:
        synchronize(handle)


def _sub_name(name: str | None, part: str) -> str | None:
    return f"{name}.{part}" if name else None


def _to_bytes(obj: Any) -> torch.Tensor:
    return torch.frombuffer(bytearray(cloudpickle.dumps(obj)), dtype=torch.uint8)


def _from_bytes(data: torch.Tensor) -> Any:
    return cloudpickle.loads(data.numpy().tobytes())


def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """Returns ``root_rank``'s ``obj`` (any cloudpickle-able object) on every rank of ``process_set``
    (``root_rank`` a global rank, as in ``broadcast``)."""
    is_root = rank() == root_rank
    payload = _to_bytes(obj) if is_root else None
    length = torch.tensor([payload.numel() if payload is not None else 0], dtype=torch.int64)
    broadcast_(length, root_rank, _sub_name(name, "size"), process_set)
    if payload is None:
        payload = torch.empty(int(length[0]), dtype=torch.uint8)
    broadcast_(payload, root_rank, _sub_name(name, "data"), process_set)
    return obj if is_root else _from_bytes(payload)


def allgather_object(obj: Any, name: str | None = None, process_set: ProcessSet = global_process_set) -> list[Any]:
    """Returns the list of every ``process_set`` rank's ``obj``, in rank order."""
    payload = _to_bytes(obj)
    lengths = synchronize(allgather_async(torch.tensor([payload.numel()], dtype=torch.int64), _sub_name(name, "sizes"),
                                          process_set))
    gathered = synchronize(allgather_async(payload, _sub_name(name, "data"), process_set))
    return [_from_bytes(part) for part in torch.split(gathered, lengths.tolist())]


@dataclass(frozen=True)
class _TensorSlot:
    """Stands for a state tensor in the layout the root sends; the data follows as a broadcast."""
    shape: tuple[int, ...]
    dtype: torch.dtype


def _describe(value: Any) -> Any:
    if (isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.layout == torch.strided
            and value.dtype in ENGINE_DTYPES):
        return _TensorSlot(tuple(value.shape), value.dtype)
    return value  # anything else (step counts, hyperparameters, tensor lists) travels pickled


def _layout(state_dict: dict[str, Any]) -> dict[str, Any]:
    return {
        "state": {index: {key: _describe(v) for key, v in entries.items()}
                  for index, entries in state_dict["state"].items()},
        "param_groups": [{k: v for k, v in group.items() if k != "params"} for group in state_dict["param_groups"]],
    }


def _receiver(local: Any, slot: _TensorSlot) -> torch.Tensor:
    """The tensor a state entry is broadcast into: this rank's own when it fits, else a new one."""
    if isinstance(local, torch.Tensor) and _describe(local) == slot:
        return local
    return torch.empty(slot.shape, dtype=slot.dtype)


def _initialize_state(optimizer: torch.optim.Optimizer) -> None:
    """Horovod's way to give an optimizer that has not stepped its state: one local step on zero
    gradients. The parameters are put back as they were (weight decay moves them even on zero
    gradients); as in Horovod, a parameter that had no gradient keeps its zero one, so scripts may read
    ``p.grad`` of every trainable parameter afterwards."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    saved = [(p.detach().clone(), p.grad) for p in params]
    for p in params:
        zeros = torch.zeros_like(p)
        p.grad = zeros.to_sparse() if isinstance(optimizer, torch.optim.SparseAdam) else zeros
    local_step(optimizer)
    with torch.no_grad():  # weight decay moves parameters even on zero gradients
        for p, (data, grad) in zip(params, saved):
            p.copy_(data)
            if grad is not None:
                p.grad = grad


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int) -> None:
    """Gives every rank ``root_rank``'s optimizer state and hyperparameters.

    As in Horovod, an optimizer that has not stepped yet first steps once on zero gradients (its
    parameters are restored; parameters without a gradient keep the zero one), so that its state exists (Adam's moments and step count, SGD's
    momentum buffers) and every rank ends up holding the root's. A rank whose state is still empty
    afterwards receives the layout of the root's, so ranks need not agree on what has stepped.
    """
    if not optimizer.state_dict()["state"]:
        _initialize_state(optimizer)
    state_dict = optimizer.state_dict()
    layout = broadcast_object(_layout(state_dict) if rank() == root_rank else None, root_rank,
                              name="optimizer_state.layout")
    if len(layout["param_groups"]) != len(state_dict["param_groups"]):
        raise ValueError(
            f"optimizer on rank {root_rank} has {len(layout['param_groups'])} parameter groups but this rank has "
            f"{len(state_dict['param_groups'])}")
    state: dict[Any, dict[str, Any]] = {}
    handles = []
    # The layout is identical everywhere, so iterating it submits the same broadcasts in the same order.
    for index, entries in layout["state"].items():
        local_entries = state_dict["state"].get(index, {})
        restored: dict[str, Any] = {}
        for key, value in entries.items():
            if isinstance(value, _TensorSlot):
                tensor = _receiver(local_entries.get(key), value)
                handles.append(broadcast_async_(tensor, root_rank, f"optimizer_state.{index}.{key}"))
                value = tensor
            restored[key] = value
        state[index] = restored
    for handle in handles:
        synchronize(handle)
    groups = [{**root_group, "params": local_group["params"]}
              for root_group, local_group in zip(layout["param_groups"], state_dict["param_groups"])]
    optimizer.load_state_dict({"state": state, "param_groups": groups})
