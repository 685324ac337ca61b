"""Rank child: a KerasEstimator fit's metric sums across a resume inside an epoch (a callback of its ``model.fit``).

What an elastic commit, or a checkpoint inside an epoch, of a Keras fit holds beyond the model and optimizer:
the epoch's metric sums so far, averaged over the ranks, so that an epoch resumed mid-way reports the metrics
of all its steps, as TorchEstimator's do (a lost rank's share included).
"""

from __future__ import annotations

from typing import Any, Callable

import keras
import numpy as np


class CarriedMetrics(keras.callbacks.Callback):
    """Keras's metric state of an epoch across a resume. The loss tracker and Keras's metrics keep sums
    (totals, counts, confusion counts) that restart with each ``model.fit``: before each in-epoch commit or
    checkpoint (``save``) the ranks' sums, averaged over the ranks by ``average``, go into
    ``state.metric_sums`` (``state``: the elastic state, or a static fit's ``EpochEvents.carry``); a fit that
    resumes the epoch adds them to its metrics after its first step, when Keras has built them all."""

    def __init__(self, state: Any, average: Callable[[np.ndarray], np.ndarray]) -> None:
        super().__init__()
        self.state, self.average = state, average
        self._pending = False

    def save(self) -> None:
        variables = self.model.metrics_variables
        flat = np.concatenate([np.ravel(np.asarray(v.numpy(), dtype=np.float64)) for v in variables] or
                              [np.zeros(0)])
        averaged, sums, at = self.average(flat), {}, 0
        for variable in variables:
            count = int(np.prod(variable.shape))
            sums[variable.path] = averaged[at:at + count].reshape(tuple(variable.shape))
            at += count
        self.state.metric_sums = sums

    def on_train_begin(self, logs: Any = None) -> None:
        # Only a resumed epoch starts with sums: an epoch's end (and its commit) leaves none.
        self._pending = self.state.metric_sums is not None

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if not self._pending:
            return
        self._pending = False
        carried = self.state.metric_sums
        for variable in self.model.metrics_variables:
            if variable.path in carried:
                variable.assign_add(np.asarray(carried[variable.path]).astype(variable.dtype))

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.metric_sums = None   # the next epoch starts from none
