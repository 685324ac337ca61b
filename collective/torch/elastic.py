"""``hvd.elastic`` for PyTorch, in Horovod's names: ``TorchState``, ``ObjectState``, ``ElasticSampler`` and
the ``run`` decorator. Run the script with ``python -m collective.run --min-np ... --host-discovery-script``.
"""

from __future__ import annotations

import copy
from typing import Any, Iterator

import torch
import torch.utils.data

from collective import runtime
from collective.elastic import state as _state
from collective.elastic.errors import HostsUpdatedInterrupt
from collective.elastic.run import Lifecycle, elastic_run
from collective.elastic.sampler import ElasticPartition
from collective.elastic.state import State, StateHandler
from collective.torch import lifecycle
from collective.torch.functions import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)

run = elastic_run(Lifecycle(shutdown=lifecycle.shutdown, init=lifecycle.init))


class ObjectState(_state.ObjectState):
    """Picklable attributes (``hvd.elastic.ObjectState(epoch=0, batch=0)``) committed, restored and synced."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(broadcast_object, runtime.rank, **kwargs)


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's sampler for elastic jobs: deals this rank's share of the epoch's samples not yet processed,
    and re-deals them when the job re-forms. Record what each batch processed (``record_batch``) and keep
    the sampler in the ``TorchState``, so that a commit keeps it and a re-form resumes mid-epoch."""

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0) -> None:
        self.dataset = dataset
        self._partition = ElasticPartition(len(dataset), shuffle, seed)
        self.reset()

    @property
    def epoch(self) -> int:
        return self._partition.epoch

    @property
    def processed_indices(self) -> set[int]:
        return self._partition.processed

    def set_epoch(self, epoch: int) -> None:
        """Starts ``epoch``: nothing processed yet, the whole dataset dealt out again."""
        self._partition.set_epoch(epoch)
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Marks this rank's batch ``batch_idx`` (counted since the last re-deal) as processed."""
        self._partition.record(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices: Any) -> None:
        self._partition.record(indices)

    def get_indices(self, batch_idx: int, batch_size: int) -> list[int]:
        return self._partition.batch_indices(batch_idx, batch_size)

    def reset(self) -> None:
        """Deals the unprocessed samples among the ranks of the current formation."""
        if runtime.is_initialized():
            self._partition.repartition(runtime.rank(), runtime.size())
        else:
            self._partition.repartition(0, 1)

    def state_dict(self) -> dict[str, Any]:
        return self._partition.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._partition.load_state_dict(state)
        self.reset()

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._partition.indices))

    def __len__(self) -> int:
        return self._partition.num_samples


class _StateDictHandler(StateHandler):
    """A torch object committed through its ``state_dict`` (a model, an optimizer, an ElasticSampler)."""

    def save(self) -> None:
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        # A copy again, so that a second restore from the same commit finds it untouched.
        self.value.load_state_dict(copy.deepcopy(self._saved))


class _ModelHandler(_StateDictHandler):
    def sync(self) -> None:
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_StateDictHandler):
    def sync(self) -> None:
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_StateDictHandler):
    def sync(self) -> None:
        # Every rank processed its own share: the epoch's processed samples are their union; the epoch is rank 0's.
        mine = self.value.state_dict()
        processed = set()
        for other in allgather_object(mine["processed_indices"]):
            processed.update(other)
        epoch = broadcast_object(mine["epoch"], 0)
        self.value.load_state_dict({"epoch": epoch, "processed_indices": sorted(processed)})

    def reset(self) -> None:
        self.value.reset()


def _handler_for(value: Any) -> StateHandler | None:
    if isinstance(value, torch.nn.Module):
        return _ModelHandler(value)
    if isinstance(value, torch.optim.Optimizer):
        return _OptimizerHandler(value)
    if isinstance(value, ElasticSampler):
        return _SamplerHandler(value)
    return None


class TorchState(_state.HandlerState):
    """Horovod's ``TorchState(model=, optimizer=, **attrs)``: the model's and optimizer's state dicts, any
    ``ElasticSampler``, and picklable attributes (``epoch=0, batch=0``), committed together."""

    def __init__(self, model: torch.nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
                 **kwargs: Any) -> None:
        objects = {"model": model, "optimizer": optimizer, **kwargs}
        handlers: dict[str, StateHandler] = {}
        attrs: dict[str, Any] = {}
        for name, value in objects.items():
            handler = _handler_for(value) if value is not None else None
            if handler is not None:
                handlers[name] = handler
            elif name not in ("model", "optimizer"):
                attrs[name] = value
        if model is not None and "model" not in handlers:
            raise TypeError(f"TorchState(model=) takes a torch.nn.Module, got {type(model).__name__}")
        if optimizer is not None and "optimizer" not in handlers:
            raise TypeError(f"TorchState(optimizer=) takes a torch.optim.Optimizer, got {type(optimizer).__name__}")
        super().__init__(broadcast_object, runtime.rank, handlers, **attrs)


__all__ = ["ElasticSampler", "HostsUpdatedInterrupt", "ObjectState", "State", "TorchState", "run"]
