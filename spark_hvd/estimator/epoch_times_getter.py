"""Driver: ``model.getEpochTimes()``, where each epoch of the fit that made a model spent its training time.

Kept apart from ``getHistory()`` (Horovod's shape) and ``getEpochMetrics()`` (which a seeded fit reproduces
exactly, while times never repeat). Like ``getFitTimings()``, it describes the fit: a loaded model has none.
"""

from __future__ import annotations

from typing import Any


class EpochTimesGetter:
    """Mixed into the fitted models (before HorovodModel); the fit sets ``_epoch_times``."""

    _epoch_times: list[dict[str, Any]]

    def getEpochTimes(self) -> list[dict[str, Any]]:
        """Driver: per epoch the fit trained, ``{"epoch", "input_s", "compute_s", "communication_s",
        "slowest_rank", "ranks"}``: the seconds each rank spent waiting for input, computing (forward,
        backward, the update) and waiting for gradient communication that compute did not hide, averaged
        over the ranks, and the rank whose input and compute took longest (docs/estimators.md says what to
        do when one share dominates). Empty for a loaded model."""
        return [dict(entry) for entry in getattr(self, "_epoch_times", [])]

    def _copy_internals_to(self, other: Any) -> None:
        super()._copy_internals_to(other)  # type: ignore[misc]
        other._epoch_times = self.getEpochTimes()
