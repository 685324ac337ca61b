"""Rank child: the torch hooks of the rank recipe (spark_hvd/recipe/rank_recipe.py) for a TorchEstimator fit.

The recipe owns the order (init, restore, broadcast, scale, wrap, epochs, checkpoints, result); here is what
each step means for torch: the model and optimizer's state dicts, ``hvd.DistributedOptimizer``, and a
lockstep ``EpochLoop`` in which every rank runs exactly the plan's steps (so uneven shards cannot
desynchronise the allreduce). Checkpoints keep the learning rate unscaled, so a resume on another number of
ranks scales it anew.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from spark_hvd.recipe.hooks import FrameworkHooks, Position, Records, Resume, WithinEpoch
from spark_hvd.recipe.plan import FitPlan


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


def scale_learning_rate(optimizer: Any, factor: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * factor


def unscaled_state(optimizer: Any, lr_factor: float) -> dict[str, Any]:
    """The optimizer's state with the learning rate as the user gave it (what checkpoints and the model keep)."""
    state = optimizer.state_dict()
    for group in state["param_groups"]:
        group["lr"] = group["lr"] / lr_factor
    return state


def add_sums(carried: np.ndarray | None, sums: np.ndarray) -> np.ndarray:
    return sums if carried is None else carried + sums


class TorchHooks(FrameworkHooks):
    carried_attributes = ("sums",)

    def __init__(self, spec: TorchRankSpec) -> None:
        self.spec, self.plan, self.objects = spec, spec.plan, spec.objects
        self.hvd: Any = None
        self.model: Any = None
        self.optimizer: Any = None
        self.loop: Any = None

    def init(self) -> Any:
        import torch

        import collective.torch as hvd

        self.hvd = hvd
        hvd.init()
        # Ranks that share a host share its cores; without this each would start one thread per core.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, hvd.local_size())))
        torch.manual_seed(self.plan.seed + hvd.rank())
        self.device = torch.device("cuda", torch.cuda.current_device()) if (
            self.spec.use_gpu and torch.cuda.is_available()) else torch.device("cpu")
        self.model, self.optimizer = self.objects.model.to(self.device), self.objects.optimizer
        return hvd

    def restore(self) -> Resume | None:
        from spark_hvd.recipe.checkpoint_fit import FIT_KEY, check_checkpoint_fit
        from spark_hvd.torch.checkpoint import load_checkpoint

        checkpoint = load_checkpoint(self.plan.data.store, self.plan.run_id)
        if checkpoint is None:
            return None
        check_checkpoint_fit(self.plan, checkpoint.get(FIT_KEY))
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        within = WithinEpoch.from_bytes(checkpoint["within"]) if checkpoint.get("within") else None
        return Resume(within.epoch if within is not None else int(checkpoint["epoch"]) + 1,
                      Records(list(checkpoint["history"]), list(checkpoint.get("epoch_metrics", []))),
                      within=within)

    def scale_learning_rate(self, factor: float) -> None:
        scale_learning_rate(self.optimizer, factor)

    def broadcast_parameters(self) -> None:
        self.hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        self.hvd.broadcast_optimizer_state(self.optimizer, root_rank=0)

    def wrap_optimizer(self) -> None:
        from spark_hvd.torch.batch_tensors import LossComputer, resolve_losses
        from spark_hvd.torch.epoch_loop import EpochLoop, metric_groups

        hvd, plan, objects = self.hvd, self.plan, self.objects
        self.optimizer = hvd.DistributedOptimizer(
            self.optimizer, named_parameters=self.model.named_parameters(),
            compression=objects.compression or hvd.Compression.none,
            backward_passes_per_step=plan.backward_passes_per_step)
        losses = resolve_losses(objects.loss, objects.loss_constructors, len(plan.label_cols))
        compute_loss = LossComputer(losses, objects.loss_weights, plan.sample_weight_col is not None)
        self.loop = EpochLoop(plan, self.model, self.optimizer, compute_loss, objects, self.device, hvd,
                              metric_groups(objects.metrics, plan.label_cols))

    def communication_wait_s(self) -> float:
        return float(getattr(self.optimizer, "communication_wait_s", 0.0))

    def run_epochs(self, start: Position, events: Any) -> None:
        feeds = self.plan.feeds(self.hvd.rank(), self.hvd.size(), self.objects.transformation_fn, resume=start.data)
        try:
            for epoch in range(start.epoch, self.plan.epochs):
                entry, flat = self.loop.train_epoch(epoch, feeds["train"], events,
                                                    first_step=start.step if epoch == start.epoch else 0)
                if "val" in feeds:
                    val_entry, val_flat = self.loop.validate(epoch, feeds["val"])
                    entry["validation"] = val_entry
                    flat.update(val_flat)
                events.epoch_done(epoch, entry, flat)
        finally:
            for feed in feeds.values():
                feed.close()

    def save(self, epoch: int, records: Records, lr_factor: float, within: WithinEpoch | None = None) -> None:
        from spark_hvd.torch.checkpoint import save_checkpoint

        if self.hvd.rank() == 0:
            save_checkpoint(self.plan.data.store, self.plan.run_id, self.model,
                            unscaled_state(self.optimizer, lr_factor), epoch, records.history, records.epoch_metrics,
                            self.plan.fit_key, within.to_bytes() if within is not None else None)

    def elastic_state(self, records: Records, attrs: dict[str, Any]) -> Any:
        return self.hvd.elastic.TorchState(model=self.model, optimizer=self.optimizer, history=records.history,
                                           epoch_metrics=records.epoch_metrics, **attrs)

    def fill_commit(self, state: Any) -> None:
        # Every rank's sums of the steps so far: a rank lost later takes its own with it.
        totals = self.loop.totals
        state.sums = add_sums(state.sums, totals.summed(self.hvd, "train.commit"))
        totals.sums[:] = 0

    def fill_epoch_commit(self, state: Any) -> None:
        state.sums = None

    def result(self, records: Records, lr_factor: float) -> dict[str, Any]:
        from spark_hvd.torch.state_bytes import state_dict_bytes, torch_bytes

        return {"state_dict": state_dict_bytes(self.model),
                "optimizer_state": torch_bytes(unscaled_state(self.optimizer, lr_factor)),
                "history": records.history, "epoch_metrics": records.epoch_metrics}
