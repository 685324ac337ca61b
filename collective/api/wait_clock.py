"""A wait-time counter: the seconds a caller spent blocked on communication, summed since it was made.

The distributed optimizers keep one each (``optimizer.communication_wait_s``): the time their step waited
for the gradients' allreduces, that is, the communication that backward did not hide. A reader takes the
difference of two readings (an epoch's, a step's). Adding is one float addition under a lock; it may be
called from any thread (TensorFlow runs a graph's collective waits on its own threads).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator


class WaitClock:
    """Seconds of waiting, summed; ``timing()`` adds the time its block takes."""

    def __init__(self) -> None:
        self._seconds = 0.0
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, float]:
        # Picklable (an optimizer holding one may be copied or pickled): the lock is not state.
        return {"seconds": self._seconds}

    def __setstate__(self, state: dict[str, float]) -> None:
        self._seconds = float(state.get("seconds", 0.0))
        self._lock = threading.Lock()

    @property
    def seconds(self) -> float:
        """Any process: the seconds waited so far."""
        return self._seconds

    def add(self, seconds: float) -> None:
        """Any process: ``seconds`` more of waiting (a negative value is ignored)."""
        if seconds > 0:
            with self._lock:
                self._seconds += seconds

    @contextmanager
    def timing(self) -> Iterator[None]:
        """Any process: the block's wall time counts as waiting (whether it returns or raises)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(time.perf_counter() - started)
