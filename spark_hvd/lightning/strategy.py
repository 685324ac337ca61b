"""``CollectiveStrategy``: a Lightning strategy whose collectives travel over ``collective.torch`` (rank child).

Lightning 2 dropped its HorovodStrategy; this is its replacement on our engine. One process per rank, one
device per process, ranks from ``collective.torch`` (already initialised by the rank's launcher):

- setup: rank 0's parameters and optimizer state are broadcast, learning rates scaled by the number of
  ranks when asked (Horovod's rule, schedulers' base rates with them), and each optimizer wrapped in
  ``hvd.DistributedOptimizer`` (``backward_passes_per_step`` = the trainer's ``accumulate_grad_batches``);
- optimizer_step: Lightning runs the step's forward and backward inside ``optimizer.step(closure)``, after
  which the gradients are synchronized, so gradient clipping and ``on_before_optimizer_step`` see the
  averaged gradients;
- reduce / all_gather / broadcast / barrier (``self.log(..., sync_dist=True)``, EarlyStopping and
  ModelCheckpoint decisions) are ``hvd.allreduce`` / ``hvd.allgather`` / ``hvd.broadcast_object`` /
  ``hvd.barrier``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from lightning_fabric.plugins import ClusterEnvironment
from lightning_utilities.core.rank_zero import rank_zero_only as utils_rank_zero_only
from pytorch_lightning.strategies import ParallelStrategy
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.rank_zero import rank_zero_only
from typing_extensions import override

import collective.torch as hvd
from collective.torch.optimizer import release_gradient_hooks
from spark_hvd.lightning.learning_rate import scale_live_learning_rates


def set_rank_zero(rank: int) -> None:
    """Lightning prints, logs and writes logger files only where its rank_zero_only rank is 0; it cannot
    know ours from the environment, so every rank says it before the Trainer exists."""
    rank_zero_only.rank = utils_rank_zero_only.rank = rank


class CollectiveEnvironment(ClusterEnvironment):
    """The ranks as collective.torch knows them; the processes were started by spark_hvd.run."""

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return "127.0.0.1"      # unused: the ranks are connected already

    @property
    def main_port(self) -> int:
        return 0

    @staticmethod
    def detect() -> bool:
        return hvd.is_initialized()

    def world_size(self) -> int:
        return hvd.size()

    def set_world_size(self, size: int) -> None:
        pass    # fixed by the launcher

    def global_rank(self) -> int:
        return hvd.rank()

    def set_global_rank(self, rank: int) -> None:
        pass

    def local_rank(self) -> int:
        return hvd.local_rank()

    def node_rank(self) -> int:
        return hvd.cross_rank()


_REDUCE_OPS = {"mean": hvd.Average, "avg": hvd.Average, "average": hvd.Average, "sum": hvd.Sum,
               "max": hvd.Max, "min": hvd.Min, "product": hvd.Product, "prod": hvd.Product}


def _reduce_op(reduce_op: Any) -> Any:
    # Lightning passes strings ("mean", "sum") or torch.distributed.ReduceOp members (ReduceOp.SUM).
    name = "mean" if reduce_op is None else (reduce_op if isinstance(reduce_op, str)
                                             else getattr(reduce_op, "name", str(reduce_op)).split(".")[-1])
    op = _REDUCE_OPS.get(name.lower())
    if op is None:
        raise ValueError(f"CollectiveStrategy.reduce: unsupported reduce_op {reduce_op!r}; "
                         f"use one of {sorted(_REDUCE_OPS)}")
    return op


class CollectiveStrategy(ParallelStrategy):
    def __init__(self, device: torch.device, lr_factor: float = 1.0, compression: Any = None,
                 checkpoint_io: Any = None) -> None:
        super().__init__(parallel_devices=[device], cluster_environment=CollectiveEnvironment(),
                         checkpoint_io=checkpoint_io)
        self._lr_factor = lr_factor
        self._compression = compression

    @property
    @override
    def root_device(self) -> torch.device:
        assert self.parallel_devices is not None
        return self.parallel_devices[0]

    @property
    def is_distributed(self) -> bool:
        return True

    @property
    @override
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        # One device per process: the replicas are the ranks (ParallelStrategy would count devices).
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    def set_world_ranks(self) -> None:
        set_rank_zero(self.global_rank)

    @override
    def model_to_device(self) -> None:
        assert self.model is not None
        self.model.to(self.root_device)

    @override
    def setup(self, trainer: Any) -> None:
        super().setup(trainer)
        if trainer.state.fn != TrainerFn.FITTING:
            return
        scale_live_learning_rates(self.optimizers, self.lr_scheduler_configs, self._lr_factor)
        assert self.lightning_module is not None
        hvd.broadcast_parameters(self.lightning_module.state_dict(), root_rank=0)
        wrapped = []
        for optimizer in self.optimizers:
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
            distributed = hvd.DistributedOptimizer(
                optimizer, named_parameters=self._named_parameters(optimizer),
                compression=self._compression or hvd.Compression.none,
                backward_passes_per_step=trainer.accumulate_grad_batches)
            for config in self.lr_scheduler_configs:
                if config.scheduler.optimizer is optimizer:
                    config.scheduler.optimizer = distributed
            wrapped.append(distributed)
        self.optimizers = wrapped

    def _named_parameters(self, optimizer: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
        """The module's names of this optimizer's parameters: they name the allreduces, the same on every rank."""
        assert self.lightning_module is not None
        mine = {id(p) for group in optimizer.param_groups for p in group["params"]}
        return [(name, p) for name, p in self.lightning_module.named_parameters() if id(p) in mine]

    @override
    def teardown(self) -> None:
        # The module's parameters outlive this Trainer (an elastic fit builds a new one per formation, on the
        # same module): their gradient hooks must go with the optimizers that own them.
        for optimizer in self.optimizers:
            release_gradient_hooks(optimizer)
        super().teardown()

    @override
    def optimizer_step(self, optimizer: Any, closure: Callable[[], Any], model: Any = None, **kwargs: Any) -> Any:
        if not hasattr(optimizer, "skip_synchronize"):
            return super().optimizer_step(optimizer, closure, model, **kwargs)

        def step_then_synchronize() -> Any:
            result = closure()          # training_step and backward (a no-op under manual optimization)
            optimizer.synchronize()
            return result

        # The step must not synchronize again: the closure above already did, after backward.
        with optimizer.skip_synchronize():
            return super().optimizer_step(optimizer, step_then_synchronize, model, **kwargs)

    @override
    def reduce(self, tensor: Any, group: Optional[Any] = None, reduce_op: Optional[Any] = "mean") -> Any:
        if not isinstance(tensor, torch.Tensor):
            return tensor
        op = _reduce_op(reduce_op)
        if op == hvd.Average and not (tensor.is_floating_point() or tensor.is_complex()):
            # Lightning's mean of integers is a float (DDP sums, then divides), not a truncated integer.
            return hvd.allreduce(tensor, op=hvd.Sum) / self.world_size
        return hvd.allreduce(tensor, op=op)

    @override
    def all_gather(self, tensor: torch.Tensor, group: Optional[Any] = None, sync_grads: bool = False) -> torch.Tensor:
        # Lightning stacks: (world_size, *shape); hvd.allgather concatenates along the first dimension.
        stacked = tensor.unsqueeze(0)
        if sync_grads:
            return hvd.allgather(stacked)
        with torch.no_grad():
            return hvd.allgather(stacked)

    @override
    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return hvd.broadcast_object(obj, root_rank=src)

    @override
    def barrier(self, name: Optional[str] = None) -> None:
        hvd.barrier()
