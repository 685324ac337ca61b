"""What every rank of a TorchEstimator fit runs: the Horovod recipe around a lockstep epoch loop.

init collective.torch -> restore the last checkpoint on rank 0, if any -> broadcast parameters and
optimizer state from rank 0 -> DistributedOptimizer -> per epoch: exactly ``train_steps`` steps on
every rank (so uneven shards cannot desynchronise the allreduce), validation, metrics averaged
across ranks, checkpoint by rank 0, progress to the driver.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import cloudpickle
import numpy as np

from spark_hvd.estimator.base import FitPlan


@dataclass(frozen=True)
class TorchRankSpec:
    plan: FitPlan
    objects: bytes            # cloudpickle(TorchObjects): pickled together so the optimizer keeps the model's parameters
    use_gpu: bool


@dataclass
class TorchObjects:
    model: Any
    optimizer: Any
    loss: Any
    loss_constructors: Any
    loss_weights: Any
    metrics: list[Callable[..., Any]]
    transformation_fn: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None
    compression: Any


class TorchRankFn:
    """Picklable callable handed to spark_hvd.run."""

    def __init__(self, spec: TorchRankSpec) -> None:
        self.spec = spec

    def __call__(self) -> dict[str, Any] | None:
        return train_rank(self.spec)


def train_rank(spec: TorchRankSpec) -> dict[str, Any] | None:
    import torch

    import collective.torch as hvd
    from spark_hvd.data import make_reader
    from spark_hvd.estimator.rank_progress import RankProgress
    from spark_hvd.torch.batch_tensors import LossComputer, model_dtype, resolve_losses
    from spark_hvd.torch.checkpoint import load_checkpoint, save_checkpoint
    from spark_hvd.torch.state_bytes import state_dict_bytes

    plan = spec.plan
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    # Ranks that share a host share its cores; without this each would start one thread per core.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, hvd.local_size())))
    torch.manual_seed(plan.seed + rank)
    objects: TorchObjects = cloudpickle.loads(spec.objects)
    device = torch.device("cuda", torch.cuda.current_device()) if (
        spec.use_gpu and torch.cuda.is_available()) else torch.device("cpu")
    model, optimizer = objects.model.to(device), objects.optimizer
    if plan.learning_rate_scaling == "linear":
        for group in optimizer.param_groups:
            group["lr"] = group["lr"] * size

    history: list[dict[str, float]] = []
    first_epoch = 0
    checkpoint = load_checkpoint(plan.data.store, plan.run_id) if rank == 0 else None
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        first_epoch, history = int(checkpoint["epoch"]) + 1, list(checkpoint["history"])
    first_epoch, history = hvd.broadcast_object((first_epoch, history), root_rank=0, name="shvd.resume")
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=objects.compression or hvd.Compression.none,
        backward_passes_per_step=plan.backward_passes_per_step)

    losses = resolve_losses(objects.loss, objects.loss_constructors, len(plan.label_cols))
    compute_loss = LossComputer(losses, objects.loss_weights, plan.sample_weight_col is not None)
    loop = _EpochLoop(plan, model, optimizer, compute_loss, objects, model_dtype(model), device, hvd)
    progress = RankProgress(rank)
    progress.start(first_epoch)
    readers = {split: make_reader(plan.data, split, rank, size, batch, shuffle=plan.shuffle and split == "train",
                                  seed=plan.seed, reader=plan.reader, shuffle_buffer_rows=plan.shuffle_buffer_size,
                                  inmemory_cache_all=plan.inmemory_cache_all)
               for split, batch, steps in (("train", plan.batch_size, plan.train_steps),
                                           ("val", plan.val_batch_size, plan.val_steps)) if steps}
    try:
        for epoch in range(first_epoch, plan.epochs):
            metrics = loop.train_epoch(epoch, readers["train"], progress)
            if "val" in readers:
                metrics.update(loop.validate(epoch, readers["val"]))
            history.append({"epoch": epoch, **metrics})
            if rank == 0:
                save_checkpoint(plan.data.store, plan.run_id, model, optimizer, epoch, history)
            progress.epoch(epoch, metrics)
    finally:
        for reader in readers.values():
            reader.close()
    if rank != 0:
        return None
    return {"state_dict": state_dict_bytes(model), "history": history}


class _EpochLoop:
    def __init__(self, plan: FitPlan, model: Any, optimizer: Any, compute_loss: Any, objects: TorchObjects,
                 float_dtype: Any, device: Any, hvd: Any) -> None:
        self.plan, self.model, self.optimizer, self.compute_loss = plan, model, optimizer, compute_loss
        self.metrics = list(objects.metrics or [])
        self.transformation_fn = objects.transformation_fn
        self.float_dtype, self.device, self.hvd = float_dtype, device, hvd

    def train_epoch(self, epoch: int, reader: Any, progress: Any) -> dict[str, float]:
        import torch

        self.model.train()
        totals = _MetricTotals(self.metric_names())
        bpps = self.plan.backward_passes_per_step
        batches = iter(reader.batches(epoch))
        self.optimizer.zero_grad()
        for step in range(self.plan.train_steps):
            features, labels, weights = self._tensors(next(batches))
            outputs = self._forward(features)
            loss = self.compute_loss(outputs, labels, weights)
            # Accumulated windows average their gradients rather than sum them.
            (loss / bpps).backward()
            if (step + 1) % bpps == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
            loss_value = loss.item()
            with torch.no_grad():
                totals.add(loss_value, self._metric_values(outputs, labels), rows=len(labels[0]))
            progress.step(epoch, step + 1, loss_value)
        return totals.averaged(self.hvd, prefix="")

    def validate(self, epoch: int, reader: Any) -> dict[str, float]:
        import torch

        self.model.eval()
        totals = _MetricTotals(self.metric_names())
        batches = iter(reader.batches(epoch))
        with torch.no_grad():
            for _ in range(self.plan.val_steps):
                features, labels, weights = self._tensors(next(batches))
                outputs = self._forward(features)
                loss = self.compute_loss(outputs, labels, weights)
                totals.add(loss.item(), self._metric_values(outputs, labels), rows=len(labels[0]))
        return totals.averaged(self.hvd, prefix="val_")

    def metric_names(self) -> list[str]:
        names = [getattr(fn, "__name__", f"metric{i}") for i, fn in enumerate(self.metrics)]
        if len(self.plan.label_cols) == 1:
            return names
        return [f"{label}_{name}" for name in names for label in self.plan.label_cols]

    def _tensors(self, batch: dict[str, np.ndarray]) -> tuple[list[Any], list[Any], Any]:
        from spark_hvd.torch.batch_tensors import batch_tensors

        return batch_tensors(batch, self.transformation_fn, self.plan.feature_cols, self.plan.label_cols,
                             self.plan.sample_weight_col, self.float_dtype, self.device)

    def _forward(self, features: list[Any]) -> list[Any]:
        from spark_hvd.torch.batch_tensors import as_outputs

        return as_outputs(self.model(*features))

    def _metric_values(self, outputs: list[Any], labels: list[Any]) -> list[float]:
        return [float(fn(output, label)) for fn in self.metrics for output, label in zip(outputs, labels)]


class _MetricTotals:
    """Row-weighted sums on this rank, averaged over every rank's rows at the end of the epoch."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.sums = np.zeros(len(names) + 2)   # loss, metrics..., rows

    def add(self, loss: float, metric_values: list[float], rows: int) -> None:
        self.sums[:-1] += np.array([loss, *metric_values]) * rows
        self.sums[-1] += rows

    def averaged(self, hvd: Any, prefix: str) -> dict[str, float]:
        import torch

        total = hvd.allreduce(torch.from_numpy(self.sums.copy()), op=hvd.Sum, name=f"shvd.{prefix}metrics").numpy()
        rows = max(total[-1], 1.0)
        return {f"{prefix}{name}": float(value / rows) for name, value in zip(["loss", *self.names], total[:-1])}
