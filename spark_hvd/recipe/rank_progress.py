"""Rank child: what rank 0 tells the driver while it trains (estimator/progress.py is the driver's side)."""

from __future__ import annotations

import time
from typing import Any

from spark_hvd.launch.rank.rank_events import emit_event

# What a rank tells the driver; the driver's FitProgress (estimator/progress.py) reads the same names.
EVENT_START, EVENT_STEP, EVENT_EPOCH = "start", "step", "epoch"

# Often enough for a live bar, rarely enough that a fast loop does not spend its time reporting.
_STEP_EVENT_INTERVAL_S = 0.25


class RankProgress:
    def __init__(self, rank: int) -> None:
        self._reporting = rank == 0
        self._last = 0.0

    def start(self, first_epoch: int) -> None:
        if self._reporting:
            emit_event({"type": EVENT_START, "first_epoch": first_epoch})

    def step(self, epoch: int, step: int, loss: float | None = None) -> None:
        if not self._reporting:
            return
        now = time.monotonic()
        if now - self._last >= _STEP_EVENT_INTERVAL_S:
            self._last = now
            emit_event({"type": EVENT_STEP, "epoch": epoch, "step": step, "loss": loss})

    def epoch(self, epoch: int, metrics: dict[str, float], times: dict[str, Any] | None = None) -> None:
        """Rank child: ``epoch`` is done, with its flat ``metrics`` and where its time went (epoch_times.py)."""
        if self._reporting:
            event: dict[str, Any] = {"type": EVENT_EPOCH, "epoch": epoch, "metrics": metrics}
            if times is not None:
                event["times"] = times
            emit_event(event)
