"""What every rank of a TorchEstimator fit runs (rank child): Horovod's recipe around a lockstep epoch loop.

init collective.torch -> restore the last checkpoint on rank 0, if any -> scale the learning rate by the
number of ranks (learning_rate_scaling='linear', Horovod's rule) -> broadcast parameters and optimizer
state from rank 0 -> DistributedOptimizer -> per epoch: exactly ``train_steps`` steps on every rank (so
uneven shards cannot desynchronise the allreduce), validation, metrics averaged across ranks,
checkpoint by rank 0 (learning rate unscaled, so a resume on another number of ranks scales it anew),
progress to the driver. An elastic plan (``elastic=True``) runs the same epochs under ``hvd.elastic.run``,
committing as it goes (elastic_training.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from spark_hvd.estimator.base import FitPlan
from spark_hvd.torch.epoch_loop import EpochLoop, metric_groups


@dataclass(frozen=True)
class TorchRankSpec:
    plan: FitPlan
    # Pickled with the rest of spark_hvd.run's payload, once: the optimizer keeps the model's parameters (one
    # pickle), and the rank child unpickles the model while the ranks meet, not after.
    objects: "TorchObjects"
    use_gpu: bool


@dataclass
class TorchObjects:
    model: Any
    optimizer: Any
    loss: Any
    loss_constructors: Any
    loss_weights: Any
    metrics: list[Any]
    transformation_fn: Callable[[dict[str, Any]], dict[str, Any]] | None
    compression: Any
    input_shapes: list[list[int]] | None = None
    train_minibatch_fn: Callable[..., Any] | None = None


class TorchRankFn:
    """Picklable callable handed to spark_hvd.run."""

    def __init__(self, spec: TorchRankSpec) -> None:
        self.spec = spec

    def __call__(self) -> dict[str, Any] | None:
        return train_rank(self.spec)


def scale_learning_rate(optimizer: Any, factor: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * factor


def unscaled_state(optimizer: Any, lr_factor: float) -> dict[str, Any]:
    """The optimizer's state with the learning rate as the user gave it (what checkpoints and the model keep)."""
    state = optimizer.state_dict()
    for group in state["param_groups"]:
        group["lr"] = group["lr"] / lr_factor
    return state


def train_rank(spec: TorchRankSpec) -> dict[str, Any] | None:
    import torch

    import collective.torch as hvd
    from spark_hvd.estimator.rank_progress import RankProgress
    from spark_hvd.torch.batch_tensors import LossComputer, resolve_losses
    from spark_hvd.torch.checkpoint import load_checkpoint, save_checkpoint
    from spark_hvd.torch.state_bytes import state_dict_bytes, torch_bytes

    plan = spec.plan
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    # Ranks that share a host share its cores; without this each would start one thread per core.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, hvd.local_size())))
    torch.manual_seed(plan.seed + rank)
    objects = spec.objects
    device = torch.device("cuda", torch.cuda.current_device()) if (
        spec.use_gpu and torch.cuda.is_available()) else torch.device("cpu")
    model, optimizer = objects.model.to(device), objects.optimizer

    history: list[dict[str, Any]] = []
    epoch_metrics: list[dict[str, float]] = []
    first_epoch = 0
    checkpoint = load_checkpoint(plan.data.store, plan.run_id) if rank == 0 else None
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        first_epoch = int(checkpoint["epoch"]) + 1
        history, epoch_metrics = list(checkpoint["history"]), list(checkpoint.get("epoch_metrics", []))
    first_epoch, history, epoch_metrics = hvd.broadcast_object(
        (first_epoch, history, epoch_metrics), root_rank=0, name="shvd.resume")
    lr_factor = size if plan.learning_rate_scaling == "linear" else 1
    scale_learning_rate(optimizer, lr_factor)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=objects.compression or hvd.Compression.none,
        backward_passes_per_step=plan.backward_passes_per_step)

    losses = resolve_losses(objects.loss, objects.loss_constructors, len(plan.label_cols))
    compute_loss = LossComputer(losses, objects.loss_weights, plan.sample_weight_col is not None)
    loop = EpochLoop(plan, model, optimizer, compute_loss, objects, device, hvd,
                     metric_groups(objects.metrics, plan.label_cols))
    progress = RankProgress(rank)
    progress.start(first_epoch)
    if plan.elastic is not None:
        from spark_hvd.torch.elastic_training import train_elastic

        return train_elastic(plan, hvd, model, optimizer, loop, progress, first_epoch, history, epoch_metrics)
    readers = plan.readers(rank, size)

    def unscaled_optimizer_state() -> dict[str, Any]:
        return unscaled_state(optimizer, lr_factor)

    try:
        for epoch in range(first_epoch, plan.epochs):
            entry, flat = loop.train_epoch(epoch, readers["train"], progress)
            if "val" in readers:
                val_entry, val_flat = loop.validate(epoch, readers["val"])
                entry["validation"] = val_entry
                flat.update(val_flat)
            history.append(entry)
            epoch_metrics.append({"epoch": epoch, **flat})
            if rank == 0:
                save_checkpoint(plan.data.store, plan.run_id, model, unscaled_optimizer_state(), epoch, history,
                                epoch_metrics)
            progress.epoch(epoch, flat)
    finally:
        for reader in readers.values():
            reader.close()
    if rank != 0:
        return None
    return {"state_dict": state_dict_bytes(model), "optimizer_state": torch_bytes(unscaled_optimizer_state()),
            "history": history, "epoch_metrics": epoch_metrics}

