"""Horovod's names for unnamed collectives ("allreduce.noname.3"), kept in step on every rank (rank process).

The engines match requests across ranks by name, so the n-th unnamed request must get the same number on
every rank, whatever happened on one rank only. Two rules keep the numbers in step:
- a number is used up only by a request its engine accepted: a call rejected on one rank (bad splits, a
  name already in flight) leaves the count where it was;
- every completed join starts a new series on every rank: while some ranks had joined, the others ran
  allreduces, or had calls refused, that the joined ranks never saw.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

# A series' numbers sit above every number of the series before, so a request still in flight from an
# earlier series never shares a name with a new one.
_SERIES_SPAN = 1 << 32


class AutoNames:
    """One per engine."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series = 0
        self._count = 0

    @contextmanager
    def next_number(self) -> Iterator[int]:
        """The next number, used up only when the block (the engine accepting the request) does not raise."""
        with self._lock:
            yield self._series * _SERIES_SPAN + self._count
            self._count += 1

    def start_series(self) -> None:
        """Called on every rank once a join has completed there."""
        with self._lock:
            self._series += 1
            self._count = 0


def auto_name(kind_name: str, number: int) -> str:
    series, count = divmod(number, _SERIES_SPAN)
    return f"{kind_name}.noname.{count}" if series == 0 else f"{kind_name}.noname.{series}.{count}"
