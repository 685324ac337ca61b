"""A non-finite training loss stops the fit at once on the rank that saw it (runs in the rank child).

Left alone, a NaN loss trains on and returns NaN weights and a history of NaN, which reads like success.
"""

from __future__ import annotations

import math
import warnings

from spark_hvd.errors import NonFiniteLossError


class LossGuard:
    """Checks each step's loss; raises NonFiniteLossError, or with ``stop=False`` warns once."""

    def __init__(self, rank: int, stop: bool) -> None:
        self.rank, self.stop = rank, stop
        self._warned = False

    def check(self, loss: float | None, epoch: int, step: int) -> None:
        if loss is None or math.isfinite(loss):
            return
        message = (f"rank {self.rank}: the training loss is {loss} at epoch {epoch}, step {step}; check the data "
                   "and the learning rate (stop_on_nonfinite_loss=False trains on with a warning)")
        if self.stop:
            raise NonFiniteLossError(message)
        if not self._warned:
            self._warned = True
            warnings.warn(message, RuntimeWarning, stacklevel=2)
