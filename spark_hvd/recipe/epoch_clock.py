"""Rank child: where one rank's training time goes in an epoch, in three shares (any framework).

An epoch's training runs from ``begin`` (the framework's epoch starts) to the end of its last training
step. In it the rank spends time:

- waiting for input: its loop blocked on the next batch (the framework reports it, ``input_waited`` or
  ``batches``);
- in communication not hidden behind compute: its DistributedOptimizer's step waiting for the gradients'
  allreduces (read from the optimizer's ``communication_wait_s`` counter, collective/api/wait_clock.py);
- in compute: the rest (forward, backward, the optimizer's update, metrics, moving batches to the device).

So the three shares are never negative and add up to the training time, which is at most the epoch's wall
time (validation and the checkpoint are outside it). Measuring costs two ``perf_counter`` calls a batch;
nothing is communicated until the epoch's end (epoch_times.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RankTimes:
    """One rank's split of an epoch's training time, in seconds."""

    input_s: float
    compute_s: float
    communication_s: float

    @property
    def busy_s(self) -> float:
        """The time of the rank's own work (input and compute): the others wait in the allreduce for the
        rank with the most."""
        return self.input_s + self.compute_s


class EpochClock:
    """``communication_wait``: the framework's counter of seconds its optimizer waited for allreduces."""

    def __init__(self, communication_wait: Callable[[], float] = lambda: 0.0) -> None:
        self._communication_wait = communication_wait
        self.begin()

    def begin(self) -> None:
        """The epoch's training starts now (its first batch not yet asked for)."""
        self._started = self._ended = time.perf_counter()
        self._input = self._excluded = 0.0
        self._waited_before = self._waited_now = self._waited()

    def input_waited(self, seconds: float) -> None:
        """The loop waited ``seconds`` for a batch."""
        self._input += max(0.0, seconds)

    def batches(self, stream: Iterable[T]) -> Iterator[T]:
        """``stream``'s items, the time spent getting each counted as waiting for input."""
        iterator = iter(stream)
        while True:
            started = time.perf_counter()
            try:
                item = next(iterator)
            except StopIteration:   # after the epoch's last step (torch): not the loop's wait
                return
            self.input_waited(time.perf_counter() - started)
            yield item

    def exclude(self, seconds: float) -> None:
        """``seconds`` of the training time so far were no training (an elastic commit between steps)."""
        self._excluded += max(0.0, seconds)

    def step_ended(self) -> None:
        """A training step ended now: the training time so far runs to here."""
        self._ended = time.perf_counter()
        self._waited_now = self._waited()

    def split(self) -> RankTimes:
        """The epoch's training time until its last step's end, in its three shares."""
        training = max(0.0, self._ended - self._started - self._excluded)
        communication = min(training, max(0.0, self._waited_now - self._waited_before))
        waiting = min(training - communication, self._input)
        return RankTimes(waiting, training - communication - waiting, communication)

    def _waited(self) -> float:
        try:
            return float(self._communication_wait())
        except Exception:  # noqa: BLE001 - a measure only: never the reason a fit fails
            return 0.0
