"""A Keras callback for elastic fits: it kills its own process (SIGKILL, as a lost executor) at the start of a
given training step on a given rank while the job has a given size, so a test loses a rank at an exact step.
Pickled by value, so the ranks need not import the tests."""

from __future__ import annotations

import os
import signal

import keras


class KillAtBatch(keras.callbacks.Callback):
    """``victim_rank`` dies at the start of its ``kill_at_call``-th training step (1-based, counted over the
    process's life) while the job has ``while_size`` ranks. Only the first process to create ``marker`` dies:
    a relaunched stage (new processes, the same size) trains on."""

    def __init__(self, victim_rank: int, kill_at_call: int, marker: str, while_size: int = 2) -> None:
        super().__init__()
        self.victim_rank, self.kill_at_call, self.marker, self.while_size = (
            victim_rank, kill_at_call, marker, while_size)
        self.calls = 0

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        import collective.keras as hvd

        self.calls += 1
        if (hvd.size() == self.while_size and hvd.rank() == self.victim_rank and self.calls == self.kill_at_call
                and self._claim()):
            os.kill(os.getpid(), signal.SIGKILL)

    def _claim(self) -> bool:
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True
