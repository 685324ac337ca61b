"""Driver: functions told of each epoch's metrics as the fits of this thread train (an Optuna trial's reports).

Kept per thread: a fit delivers its epochs in the thread that called fit(), so fits run side by side
(CrossValidator's ``parallelism``, Optuna's ``n_jobs``) each hear only their own epochs. What a listener
raises ends its fit at once (the barrier stage is cancelled) and comes out of fit(): that is how a pruned
trial stops.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator

EpochListener = Callable[[int, dict[str, float]], None]

_local = threading.local()


def _listeners() -> list[EpochListener]:
    if not hasattr(_local, "listeners"):
        _local.listeners = []
    return _local.listeners


@contextlib.contextmanager
def listening(listener: EpochListener) -> Iterator[None]:
    """Within the block, ``listener(epoch, metrics)`` hears each epoch of the fits this thread runs."""
    listeners = _listeners()
    listeners.append(listener)
    try:
        yield
    finally:
        listeners.remove(listener)


def epoch_callback(*others: EpochListener | None) -> EpochListener | None:
    """One callback for a fit: ``others`` (MLflow's logging), then this thread's listeners, in order; None
    when there is none."""
    chosen = [listener for listener in others if listener is not None] + list(_listeners())
    if not chosen:
        return None

    def tell(epoch: int, metrics: dict[str, float]) -> None:
        for listener in chosen:
            listener(epoch, metrics)

    return tell
