"""Rank child: an epoch's row order over a split's row groups, the same on every rank at any world size.

Positions ``[0, rows)`` are the first pass over the split, ``[rows, 2 * rows)`` the second, and so on (an
epoch's padding, or an epoch longer than the data). Without shuffling a pass is the rows in file order.
With shuffling, a pass's order is drawn from (seed, epoch, pass) alone:

1. the row groups are permuted, and laid end to end;
2. that sequence is cut into windows of ``window_rows`` rows, and each window's rows are permuted by their
   own generator (seed, epoch, pass, window).

So any rank can say which row sits at any position without reading anything, and a rank that trains a
stretch of positions reads only the row groups its windows draw from. A window plays the part of a shuffle
buffer: rows travel across the row groups of one window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence, Union

import numpy as np

_GROUPS, _WINDOW = 0, 1   # the two streams of a pass's generator


@dataclass(frozen=True)
class Slice:
    """Rows [start, stop) of row group ``group``, in order."""

    group: int
    start: int
    stop: int


@dataclass(frozen=True)
class Gather:
    """One row per position: ``rows[i]`` of row group ``groups[i]``."""

    groups: np.ndarray
    rows: np.ndarray


Stretch = Union[Slice, Gather]


class EpochOrder:
    """Which row of the split sits at each position of an epoch, for row groups of ``group_rows`` rows (in
    file order, across files)."""

    def __init__(self, group_rows: Sequence[int], shuffle: bool, seed: int | None, window_rows: int) -> None:
        if shuffle and window_rows < 1:
            raise ValueError(f"shuffle window must hold at least 1 row, got {window_rows}")
        self.group_rows = np.asarray(group_rows, dtype=np.int64)
        self.rows = int(self.group_rows.sum())
        self.shuffle = shuffle
        # Every rank must draw the same order: an unseeded shuffle is seeded 0, not by the clock.
        self.seed = 0 if seed is None else int(seed) & 0xFFFFFFFF
        self.window_rows = window_rows
        self._group_starts = np.concatenate([[0], np.cumsum(self.group_rows)])

    def stretches(self, epoch: int, start: int, stop: int) -> Iterator[Stretch]:
        """The rows at positions [start, stop), in position order: unshuffled, slices of row groups;
        shuffled, one gather per window at most."""
        if self.rows == 0:
            if stop > start:
                raise ValueError("the split has no rows to read")
            return
        position = start
        while position < stop:
            pass_index, offset = divmod(position, self.rows)
            end = min(stop - pass_index * self.rows, self.rows)
            yield from (self._shuffled(epoch, pass_index, offset, end) if self.shuffle
                        else self._in_file_order(offset, end))
            position += end - offset

    def _in_file_order(self, start: int, stop: int) -> Iterator[Slice]:
        starts = self._group_starts
        group = int(np.searchsorted(starts, start, side="right")) - 1
        while start < stop:
            group_stop = int(starts[group + 1])
            end = min(stop, group_stop)
            if end > start:
                yield Slice(group, start - int(starts[group]), end - int(starts[group]))
            start = end
            group += 1

    def _shuffled(self, epoch: int, pass_index: int, start: int, stop: int) -> Iterator[Gather]:
        order = np.random.default_rng([self.seed, epoch, pass_index, _GROUPS]).permutation(len(self.group_rows))
        laid = self.group_rows[order]
        laid_starts = np.concatenate([[0], np.cumsum(laid)])
        window = self.window_rows
        for first in range(start // window * window, stop, window):
            length = min(window, self.rows - first)
            permutation = np.random.default_rng([self.seed, epoch, pass_index, _WINDOW, first // window]
                                                ).permutation(length)
            low, high = max(start, first) - first, min(stop, first + length) - first
            sources = permutation[low:high] + first            # positions in the laid-out groups
            slot = np.searchsorted(laid_starts, sources, side="right") - 1
            yield Gather(order[slot], sources - laid_starts[slot])
