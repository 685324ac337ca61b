"""The callbacks a Lightning fit adds on every rank (rank child): its record and resume point, and NaN checks.

``FitRecorder`` runs after the module's and the user's epoch-end hooks (Lightning calls checkpoint
callbacks last), so each epoch's record holds everything logged in it. It hands every step and epoch to
the rank recipe, which keeps the metrics (spark-hvd's flat history), has the resume checkpoint saved
under the Store with the logs, tells the driver (progress bar) and, in an elastic fit, commits. Its state
travels inside every checkpoint: the records, the final logged metrics and whether training stopped
early. Every checkpoint keeps the learning rates unscaled (divided by the ranks' factor) and they are
scaled again on loading, so a run resumes on any number of ranks and a saved checkpoint trains on one
process as it is.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from pytorch_lightning import Callback
from pytorch_lightning.callbacks import Checkpoint

from spark_hvd.lightning.learning_rate import scale_checkpoint_learning_rates

RECORDER_STATE_KEY = "spark_hvd.FitRecorder"   # where a checkpoint keeps the recorder's state


def scalar_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The one-number metrics of a Lightning metrics dict, as floats."""
    out = {}
    for name, value in metrics.items():
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            out[str(name)] = float(value.detach().cpu().item())
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[str(name)] = float(value)
    return out


def step_loss(outputs: Any) -> Any:
    """The loss a training step returned: a tensor, or the 'loss' of a dict; None when it returned neither."""
    if isinstance(outputs, dict):
        outputs = outputs.get("loss")
    return outputs if isinstance(outputs, torch.Tensor) else None


class _Recording(Callback):
    """Hands each step and epoch to the rank recipe's ``events`` (which keep the records, have the resume
    checkpoint saved, report progress and commit), and keeps in Lightning's checkpoints what a resume needs:
    the records, the final logged metrics and whether training stopped early."""

    def __init__(self, events: Any, lr_factor: float) -> None:
        self.events, self.lr_factor = events, lr_factor
        self.logged: dict[str, float] = {}
        self.stopped = False
        self.within: bytes | None = None     # where the checkpoint being saved stands (WithinEpoch.to_bytes)
        # Input wait: Lightning's loop fetches a batch (and moves it to the device) between one batch's end
        # and the next one's start, whatever the data module; a validation between them is left out.
        self._fetch_from: float | None = None
        self._validation_from: float | None = None
        self._validated = 0.0

    @property
    def state_key(self) -> str:
        return RECORDER_STATE_KEY

    @property
    def epoch_metrics(self) -> list[dict[str, float]]:
        return self.events.records.epoch_metrics

    def state_dict(self) -> dict[str, Any]:
        return {"epoch_metrics": list(self.epoch_metrics), "logged": self.logged, "stopped": self.stopped,
                "within": self.within}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        records = self.events.records
        # In place: the recipe's records (or an elastic state's) are the ones the fit keeps.
        records.epoch_metrics[:] = [dict(entry) for entry in state_dict.get("epoch_metrics", [])]
        records.history[:] = [dict(entry) for entry in records.epoch_metrics]
        self.logged = dict(state_dict.get("logged", {}))
        self.stopped = bool(state_dict.get("stopped", False))

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.events.epoch_begins(trainer.current_epoch)
        self._fetch_from, self._validated = time.perf_counter(), 0.0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._fetch_from is not None:
            self.events.input_waited(time.perf_counter() - self._fetch_from - self._validated)
            self.events.outside_training(self._validated)
        self._fetch_from, self._validated = None, 0.0

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._validation_from = time.perf_counter()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._validation_from is not None:
            self._validated += time.perf_counter() - self._validation_from
        self._validation_from = None

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = step_loss(outputs)
        # Lightning numbers a resumed epoch's batches from where it left off.
        self.events.step_done(trainer.current_epoch, batch_idx + 1, None if loss is None else float(loss.detach()))
        self._fetch_from, self._validated = time.perf_counter(), 0.0

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        epoch = trainer.current_epoch
        metrics = scalar_metrics(trainer.callback_metrics)
        self.logged = scalar_metrics(trainer.logged_metrics)
        self.stopped = bool(trainer.should_stop)
        self.events.epoch_done(epoch, {"epoch": epoch, **metrics}, metrics)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        scale_checkpoint_learning_rates(checkpoint, 1 / self.lr_factor)

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        # Lightning restores the optimizers and schedulers from this same dict after the callbacks.
        scale_checkpoint_learning_rates(checkpoint, self.lr_factor)


class FitRecorder(_Recording, Checkpoint):
    """The recorder as a checkpoint callback: Lightning runs it after every other epoch-end hook."""


class PlainFitRecorder(_Recording):
    """The recorder when the user turned checkpointing off (trainer_args enable_checkpointing=False),
    which Lightning enforces by refusing checkpoint callbacks: no resume point then."""


class TerminateOnNan(Callback):
    """Horovod's ``terminate_on_nan``: a non-finite training loss ends the fit with an error (Lightning 1.x's
    ``Trainer(terminate_on_nan=True)``, gone from Lightning 2)."""

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = step_loss(outputs)
        if loss is not None and not math.isfinite(float(loss.detach())):
            raise ValueError(f"the loss returned by training_step is {float(loss.detach())} at epoch "
                             f"{trainer.current_epoch}, batch {batch_idx} (terminate_on_nan=True)")
