"""Rank child: one rank's training and validation epochs of a TorchEstimator fit, with Horovod's history.

Each epoch gives Horovod's history entry, ``{'epoch': e, 'train': {'loss': ..., 'all_metrics': [...]},
'validation': {...}}``, where ``all_metrics`` has one dict per metric group, ``{'group_<g>_<label>': value}``,
and spark-hvd's flat view of it, ``{'loss': ..., '<metric>': ..., 'val_loss': ...}`` (progress, MLflow).
Values are averaged over every rank's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from spark_hvd.recipe.plan import FitPlan
from spark_hvd.recipe.nonfinite import LossGuard


@dataclass(frozen=True)
class MetricSlot:
    group: int
    label: str
    fn: Callable[..., Any]
    output_index: int
    flat_name: str

    @property
    def horovod_name(self) -> str:
        return f"group_{self.group}_{self.label}"


def metric_groups(metrics: Sequence[Any] | None, label_cols: Sequence[str]) -> list[MetricSlot]:
    """Horovod's metric groups: each entry of ``metrics`` is a group, a list of one function (used on every
    output) or of one function per output; a bare function is a group of one."""
    slots = []
    for g, group in enumerate(metrics or []):
        fns = list(group) if isinstance(group, (list, tuple)) else [group]
        if len(fns) not in (1, len(label_cols)):
            raise ValueError(f"metric group {g} has {len(fns)} functions for {len(label_cols)} label column(s); "
                             "give one for all outputs or one per output")
        for i, label in enumerate(label_cols):
            fn = fns[0] if len(fns) == 1 else fns[i]
            name = getattr(fn, "__name__", f"metric{g}")
            flat = name if len(label_cols) == 1 else f"{label}_{name}"
            slots.append(MetricSlot(g, label, fn, i, flat))
    return slots


class EpochLoop:
    def __init__(self, plan: FitPlan, model: Any, optimizer: Any, compute_loss: Any, objects: Any,
                 device: Any, hvd: Any, metrics: list[MetricSlot]) -> None:
        from spark_hvd.torch.batch_tensors import model_dtype

        self.plan, self.model, self.optimizer, self.compute_loss = plan, model, optimizer, compute_loss
        self.metrics = metrics
        self.objects, self.device, self.hvd = objects, device, hvd
        self.float_dtype = model_dtype(model)
        self.loss_guard = LossGuard(hvd.rank(), plan.stop_on_nonfinite_loss)
        self.totals: _Totals | None = None

    def train_epoch(self, epoch: int, feed: Any, events: Any,
                    first_step: int = 0) -> tuple[dict[str, Any], dict[str, float]]:
        """Steps ``first_step`` to the feed's steps of ``epoch`` (a resumed epoch skips the batches it
        trained); ``events.step_done`` hears of each (progress, commits and checkpoints, which move the
        epoch's sums so far from ``totals`` to ``events.carry.sums``, every rank's added up, where a resumed
        epoch's sums before ``first_step`` already are)."""
        import torch

        self.model.train()
        self.totals = totals = _Totals(len(self.metrics))
        events.epoch_begins(epoch)
        self.optimizer.zero_grad()
        # The time spent in the feed's iterator is the epoch's input wait (recipe/epoch_clock.py).
        for step, batch in enumerate(events.input_batches(feed.epoch(epoch, skip=first_step)), start=first_step):
            features, labels, weights = self._tensors(batch)
            outputs, labels, loss = self._step(step, features, labels, weights)
            loss_value = float(loss.detach())
            self.loss_guard.check(loss_value, epoch, step)
            with torch.no_grad():
                totals.add(loss_value, self._metric_values(outputs, labels), rows=len(labels[0]))
            events.step_done(epoch, step + 1, loss_value)
        loss, values = totals.averaged(self.hvd, "train", events.carry.sums)
        return {"epoch": epoch, "train": self._horovod_entry(loss, values)}, self._flat(loss, values, prefix="")

    def validate(self, epoch: int, feed: Any) -> tuple[dict[str, Any], dict[str, float]]:
        import torch

        from spark_hvd.torch.batch_tensors import align_labels, as_outputs

        self.model.eval()
        totals = _Totals(len(self.metrics))
        with torch.no_grad():
            for batch in feed.epoch(epoch):
                features, labels, weights = self._tensors(batch)
                outputs = as_outputs(self.model(*features))
                labels = align_labels(outputs, labels, self.plan.label_shapes)
                loss = self.compute_loss(outputs, labels, weights)
                totals.add(float(loss), self._metric_values(outputs, labels), rows=len(labels[0]))
        loss, values = totals.averaged(self.hvd, "val")
        return self._horovod_entry(loss, values), self._flat(loss, values, prefix="val_")

    def _step(self, step: int, features: list[Any], labels: list[Any], weights: Any) -> tuple[list, list, Any]:
        from spark_hvd.torch.batch_tensors import align_labels, as_outputs

        def transform_outputs(outputs: Any, labels_: list[Any]) -> tuple[list[Any], list[Any]]:
            outputs = as_outputs(outputs)
            return outputs, align_labels(outputs, labels_, self.plan.label_shapes)

        custom = self.objects.train_minibatch_fn
        if custom is not None:
            # Horovod's hook: it runs zero_grad, forward, loss, backward and step itself.
            outputs, loss = custom(self.model, self.optimizer, transform_outputs, self.compute_loss,
                                   features, labels, weights)
            outputs, labels = transform_outputs(outputs, labels)
            return outputs, labels, loss
        outputs, labels = transform_outputs(self.model(*features), labels)
        loss = self.compute_loss(outputs, labels, weights)
        bpps = self.plan.backward_passes_per_step
        # Accumulated windows average their gradients rather than sum them.
        (loss / bpps).backward()
        if (step + 1) % bpps == 0:
            self.optimizer.step()
            self.optimizer.zero_grad()
        return outputs, labels, loss

    def _tensors(self, batch: dict[str, np.ndarray]) -> tuple[list[Any], list[Any], Any]:
        from spark_hvd.torch.batch_tensors import batch_tensors

        # The feed applied transformation_fn already.
        return batch_tensors(batch, None, self.plan.feature_cols, self.plan.label_cols,
                             self.plan.sample_weight_col, self.float_dtype, self.device, self.objects.input_shapes)

    def _metric_values(self, outputs: list[Any], labels: list[Any]) -> list[float]:
        return [float(slot.fn(outputs[slot.output_index], labels[slot.output_index])) for slot in self.metrics]

    def _horovod_entry(self, loss: float, values: list[float]) -> dict[str, Any]:
        groups: dict[int, dict[str, float]] = {}
        for slot, value in zip(self.metrics, values):
            groups.setdefault(slot.group, {})[slot.horovod_name] = value
        return {"loss": loss, "all_metrics": [groups[g] for g in sorted(groups)]}

    def _flat(self, loss: float, values: list[float], prefix: str) -> dict[str, float]:
        return {f"{prefix}loss": loss, **{f"{prefix}{slot.flat_name}": v for slot, v in zip(self.metrics, values)}}


class _Totals:
    """Row-weighted sums on this rank, averaged over every rank's rows at the end of the epoch."""

    def __init__(self, metric_count: int) -> None:
        self.sums = np.zeros(metric_count + 2)   # loss, metrics..., rows

    def add(self, loss: float, metric_values: list[float], rows: int) -> None:
        self.sums[:-1] += np.array([loss, *metric_values]) * rows
        self.sums[-1] += rows

    def summed(self, hvd: Any, split: str) -> np.ndarray:
        """Every rank's sums added up."""
        import torch

        return hvd.allreduce(torch.from_numpy(self.sums.copy()), op=hvd.Sum, name=f"shvd.{split}.metrics").numpy()

    def averaged(self, hvd: Any, split: str, carried: np.ndarray | None = None) -> tuple[float, list[float]]:
        total = self.summed(hvd, split)
        if carried is not None:
            total = total + carried
        rows = max(total[-1], 1.0)
        means = [float(value / rows) for value in total[:-1]]
        return means[0], means[1:]
