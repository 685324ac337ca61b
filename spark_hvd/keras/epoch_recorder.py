"""The last callback of a rank's ``model.fit`` (runs in the rank child): keeps the history (logs already
averaged over the ranks), checkpoints after every epoch on rank 0 (the model with its learning rate
unscaled, and what the checkpoint_callback saved) and streams progress to the driver."""

from __future__ import annotations

from typing import Any

import keras

from spark_hvd.estimator.nonfinite import LossGuard
from spark_hvd.keras.rank_callbacks import CheckpointFile


class EpochRecorder(keras.callbacks.Callback):
    def __init__(self, plan: Any, rank: int, history: list[dict[str, float]], lr_factor: int,
                 checkpoint_file: CheckpointFile | None) -> None:
        super().__init__()
        from spark_hvd.estimator.rank_progress import RankProgress

        self.plan, self.rank, self.lr_factor, self.checkpoint_file = plan, rank, lr_factor, checkpoint_file
        self.history = list(history)
        self.progress = RankProgress(rank)
        self.loss_guard = LossGuard(rank, plan.stop_on_nonfinite_loss)
        self._epoch = 0
        self._started = False

    def on_train_begin(self, logs: dict | None = None) -> None:
        # Once: an elastic fit resumed mid-epoch calls model.fit twice, and the driver reads a start as a
        # new stage.
        if not self._started:
            self._started = True
            self.progress.start(self.history[-1]["epoch"] + 1 if self.history else 0)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        loss = (logs or {}).get("loss")
        loss = None if loss is None else float(loss)
        self.loss_guard.check(loss, self._epoch, batch)
        self.progress.step(self._epoch, batch + 1, loss)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        from spark_hvd.keras.checkpoint import save_checkpoint
        from spark_hvd.keras.learning_rate import unscaled_model_bytes

        metrics = {str(k): float(v) for k, v in (logs or {}).items()}
        self.history.append({"epoch": epoch, **metrics})
        if self.rank == 0:
            callback = self.checkpoint_file.changes() if self.checkpoint_file is not None else None
            save_checkpoint(self.plan.data.store, self.plan.run_id, unscaled_model_bytes(self.model, self.lr_factor),
                            epoch, self.history, callback)
        self.progress.epoch(epoch, metrics)
