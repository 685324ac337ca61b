"""``hvd.elastic`` for Keras, in Horovod's names: ``KerasState`` (Horovod's ``TensorFlowKerasState``), the
callbacks that keep it current during ``model.fit``, and the ``run`` decorator.

Keep ``CommitStateCallback`` after the update callbacks in the list: Keras calls them in order, and a
commit should hold the batch and epoch that just ended.
"""

from __future__ import annotations

from typing import Any

import keras

from collective.elastic.errors import HostsUpdatedInterrupt
from collective.elastic.state import State
from collective.tensorflow.elastic import ObjectState, TensorFlowKerasState, run

KerasState = TensorFlowKerasState


class CommitStateCallback(keras.callbacks.Callback):
    """Commits ``state`` every ``batches_per_commit`` batches and at each epoch's end (where a commit also
    lets added workers join)."""

    def __init__(self, state: State, batches_per_commit: int = 1) -> None:
        super().__init__()
        if batches_per_commit < 1:
            raise ValueError(f"batches_per_commit must be >= 1, got {batches_per_commit}")
        self.state = state
        self.batches_per_commit = batches_per_commit
        self._remaining = batches_per_commit

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._remaining -= 1
        if self._remaining == 0:
            self._remaining = self.batches_per_commit
            self.state.commit()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._remaining = self.batches_per_commit
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps ``state.batch`` at the number of batches done in the current epoch, counting those done before a
    re-form: a resumed ``fit`` over the remaining batches continues the count (0 again at the epoch's end)."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self.state = state
        self._offset = 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._offset = self.state.batch

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.state.batch = self._offset + batch + 1

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Counts ``state.epoch`` up at each epoch's end, so that a resumed job trains the epochs left."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self.state = state

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.epoch += 1


__all__ = ["CommitStateCallback", "HostsUpdatedInterrupt", "KerasState", "ObjectState", "State",
           "TensorFlowKerasState", "UpdateBatchStateCallback", "UpdateEpochStateCallback", "run"]
