"""The driver's view of a fit: a tqdm bar over epochs and steps with the live metrics rank 0
streams (``spark_hvd.emit_event``), and the per-epoch history.

Rank 0 sends ``{"type": "start", "first_epoch"}``, ``{"type": "step", "epoch", "step", "loss"}`` now
and then, and ``{"type": "epoch", "epoch", "metrics"}`` after each epoch's validation.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Mapping

EVENT_START, EVENT_STEP, EVENT_EPOCH = "start", "step", "epoch"


class FitProgress:
    def __init__(self, epochs: int, steps_per_epoch: int, enabled: bool = True,
                 on_epoch: Callable[[int, dict[str, float]], None] | None = None) -> None:
        self.epochs = epochs
        self.steps_per_epoch = steps_per_epoch
        self.history: list[dict[str, float]] = []
        self._on_epoch = on_epoch
        self._bar: Any = None
        self._enabled = enabled
        self._done_steps = 0
        # time.monotonic() when rank 0 started training and when it finished its last epoch.
        self.started_at: float | None = None
        self.finished_at: float | None = None

    def on_event(self, rank: int, data: Mapping[str, Any]) -> None:
        if rank != 0:
            return
        kind = data.get("type")
        if kind == EVENT_START:
            self.started_at = time.monotonic()
            self._start(int(data.get("first_epoch", 0)))
        elif kind == EVENT_STEP:
            self._step(int(data["epoch"]), int(data["step"]), data.get("loss"))
        elif kind == EVENT_EPOCH:
            metrics = {str(k): float(v) for k, v in dict(data.get("metrics", {})).items()}
            self.history.append({"epoch": int(data["epoch"]), **metrics})
            self.finished_at = time.monotonic()
            self._epoch_done(int(data["epoch"]), metrics)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _start(self, first_epoch: int) -> None:
        self._done_steps = first_epoch * self.steps_per_epoch
        if not self._enabled:
            return
        from tqdm.auto import tqdm

        self._bar = tqdm(total=self.epochs * self.steps_per_epoch, initial=self._done_steps, unit="step",
                         file=sys.stderr, dynamic_ncols=True, mininterval=0.5, desc=self._description(first_epoch))

    def _step(self, epoch: int, step: int, loss: Any) -> None:
        target = epoch * self.steps_per_epoch + step
        if self._bar is not None and target > self._done_steps:
            self._bar.update(target - self._done_steps)
            self._bar.set_description(self._description(epoch), refresh=False)
            if loss is not None:
                self._bar.set_postfix(loss=f"{float(loss):.4g}", refresh=False)
        self._done_steps = max(self._done_steps, target)

    def _epoch_done(self, epoch: int, metrics: dict[str, float]) -> None:
        self._step(epoch, self.steps_per_epoch, None)
        if self._bar is not None:
            self._bar.set_postfix({k: f"{v:.4g}" for k, v in metrics.items()})
            self._bar.write(f"epoch {epoch + 1}/{self.epochs}: " +
                            ", ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
        if self._on_epoch is not None:
            self._on_epoch(epoch, metrics)

    def _description(self, epoch: int) -> str:
        return f"epoch {min(epoch + 1, self.epochs)}/{self.epochs}"
