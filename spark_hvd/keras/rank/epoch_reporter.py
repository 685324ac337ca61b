"""Rank child: the last callback of a rank's ``model.fit``, which tells the rank recipe of every step and epoch.

Keras's loop runs the epochs; this callback hands each step's end (with the loss, after the non-finite check)
and each epoch's end (with the logs, already averaged over the ranks) to the recipe's ``EpochEvents``, which
keeps the history, has the checkpoint saved, reports progress and commits. It comes after the user's
callbacks and the checkpoint_callback, so that a checkpoint holds what they saved in the epoch.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import keras

from spark_hvd.recipe.nonfinite import LossGuard
from spark_hvd.recipe.hooks import Position


class EpochReporter(keras.callbacks.Callback):
    def __init__(self, events: Any, start: Position, rank: int, stop_on_nonfinite_loss: bool) -> None:
        super().__init__()
        self.events, self.start = events, start
        self.loss_guard = LossGuard(rank, stop_on_nonfinite_loss)
        self._epoch, self._offset = start.epoch, 0
        # When each training batch was ready (feed.py), in the order the steps take them; set per model.fit.
        self.ready_times: deque[float] = deque()
        self._step_began = 0.0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        # A fit resuming mid-epoch numbers its batches from 0: the steps before the resume count too.
        self._epoch = epoch
        self._offset = self.start.step if epoch == self.start.epoch else 0
        self.events.epoch_begins(epoch)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._step_began = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        # The step took its batch from tf.data's prefetch buffer: it waited for input only if it began before
        # the batch was ready.
        if self.ready_times:
            self.events.input_waited(self.ready_times.popleft() - self._step_began)
        loss = (logs or {}).get("loss")
        loss = None if loss is None else float(loss)
        self.loss_guard.check(loss, self._epoch, batch)
        self.events.step_done(self._epoch, self._offset + batch + 1, loss)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        metrics = {str(k): float(v) for k, v in (logs or {}).items()}
        self.events.epoch_done(epoch, {"epoch": epoch, **metrics}, metrics)
