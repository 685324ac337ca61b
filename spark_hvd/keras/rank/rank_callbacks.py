"""The callbacks of one rank's ``model.fit``, in Horovod's order (runs in the rank child):

1. ``BroadcastGlobalVariablesCallback(0)``: every rank starts from rank 0's weights and optimizer state
   (not in an elastic fit: there the state's sync does it, and hvd.elastic's callbacks come last);
2. ``MetricAverageCallback()``: the logs every later callback sees are averaged over the ranks;
3. the user's ``callbacks`` (a TensorBoard one writes, on rank 0, to the run's logs under the Store, and
   is left out on the other ranks, which would write the same files);
4. on rank 0, the ``checkpoint_callback``, saving to the run's local checkpoint file;
5. the estimator's own (epoch_reporter.py: the recipe's history, checkpoint, progress and commits).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import keras
import numpy as np

from spark_hvd.keras.checkpoint import CallbackSave


class CheckpointFile:
    """Rank 0's ``checkpoint_callback`` and the local file it saves to, which the returned model and the
    resume checkpoint take from."""

    def __init__(self, callback: Any, directory: str) -> None:
        self.callback = callback
        self.suffix = ".weights.h5" if getattr(callback, "save_weights_only", False) else ".keras"
        self.path = os.path.join(directory, f"checkpoint{self.suffix}")
        callback.filepath = self.path     # as Horovod does: the run decides where it saves
        self._saved_stamp: tuple[int, int] | None = None

    def restore(self, saved: CallbackSave) -> None:
        """What a resumed run's callback had saved and the best value it had seen."""
        if saved.blob is not None and saved.suffix == self.suffix:
            with open(self.path, "wb") as f:
                f.write(saved.blob)
            self._saved_stamp = self._stamp()
        if saved.best is not None and hasattr(self.callback, "best"):
            self.callback.best = saved.best

    def changes(self) -> CallbackSave:
        """The file, if the callback saved it since the last call, and its best value."""
        stamp = self._stamp()
        blob = None
        if stamp is not None and stamp != self._saved_stamp:
            with open(self.path, "rb") as f:
                blob = f.read()
            self._saved_stamp = stamp
        best = getattr(self.callback, "best", None)
        return CallbackSave(blob, None if best is None else float(np.asarray(best)), self.suffix)

    def load_into(self, model: Any, optimizer: Any, custom_objects: dict[str, Any]) -> None:
        """The saved model (weights, and optimizer state unless weights only) into the trained one."""
        from spark_hvd.keras.saving import restore_state

        if not os.path.exists(self.path):
            return
        if self.suffix == ".weights.h5":
            model.load_weights(self.path)
            return
        with open(self.path, "rb") as f:
            restore_state(model, optimizer, f.read(), custom_objects)

    def _stamp(self) -> tuple[int, int] | None:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return None
        return info.st_mtime_ns, info.st_size


class LogsSync(keras.callbacks.Callback):
    """Copies rank 0's TensorBoard files to the run's logs under the Store after every epoch."""

    def __init__(self, local_dir: str, store: Any, run_id: str) -> None:
        super().__init__()
        self.local_dir, self.store, self.run_id = local_dir, store, run_id
        self._copied: dict[str, tuple[int, int]] = {}

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.sync()

    def on_train_end(self, logs: dict | None = None) -> None:
        self.sync()

    def sync(self) -> None:
        target = self.store.get_logs_path(self.run_id).rstrip("/")
        for root, _, files in os.walk(self.local_dir):
            for name in files:
                path = os.path.join(root, name)
                info = os.stat(path)
                stamp = (info.st_mtime_ns, info.st_size)
                if self._copied.get(path) == stamp:
                    continue
                with open(path, "rb") as f:
                    self.store.write_bytes(f"{target}/{os.path.relpath(path, self.local_dir)}", f.read())
                self._copied[path] = stamp


def require_tensorboard() -> None:
    """Keras's TensorBoard callback writes through tf.summary, which needs the tensorboard package; TensorFlow
    2.21 no longer installs it. Without it the first epoch's end would fail with TBNotInstalledError: say so
    before training, and how to install it."""
    if importlib.util.find_spec("tensorboard") is None:
        raise ModuleNotFoundError(
            "a keras.callbacks.TensorBoard callback needs the tensorboard package on the executors, and this "
            "rank's Python lacks it: pip install tensorboard (pip install 'spark-hvd[tensorflow]' includes it)",
            name="tensorboard")


def rank_callbacks(hvd: Any, rank: int, user_callbacks: list[Any], checkpoint: CheckpointFile | None,
                   ours: list[keras.callbacks.Callback], logs_dir: str, store: Any, run_id: str,
                   broadcast: bool = True) -> list[Any]:
    """``broadcast=False``: an elastic fit, whose state's sync gives every rank rank 0's variables instead."""
    callbacks: list[Any] = [hvd.MetricAverageCallback()]
    if broadcast:
        callbacks.insert(0, hvd.BroadcastGlobalVariablesCallback(0))
    boards = [c for c in user_callbacks if isinstance(c, keras.callbacks.TensorBoard)]
    if rank == 0 and boards:
        require_tensorboard()
    if rank == 0:
        callbacks += user_callbacks
        for board in boards:
            board.log_dir = logs_dir
    else:
        callbacks += [c for c in user_callbacks if not isinstance(c, keras.callbacks.TensorBoard)]
    if checkpoint is not None:
        callbacks.append(checkpoint.callback)
    if rank == 0 and boards:
        callbacks.append(LogsSync(logs_dir, store, run_id))
    callbacks += ours
    return callbacks
