"""Rank child: an epoch's row order over a split, the same on every rank at any world size.

Rows are numbered across the split's files in file order. Positions ``[0, rows)`` are the first pass over
the split, ``[rows, 2 * rows)`` the second, and so on (an epoch's padding, or an epoch longer than the data).
Without shuffling a pass is the rows in file order. With shuffling, a pass's order is drawn from (seed,
epoch, pass) alone:

1. the rows are cut into blocks of a quarter window, which are permuted and laid end to end;
2. that sequence is cut into windows of ``window_rows`` rows, and each window's rows are permuted by their
   own generator (seed, epoch, pass, window).

So any rank can say which row sits at any position without reading anything, a window reads a few
contiguous runs of rows, and the order does not depend on how the rows fall into row groups (a split
rewritten with other row groups keeps it). A window plays the part of a shuffle buffer: rows travel across
its blocks, which come from anywhere in the split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Union

import numpy as np

_BLOCKS, _WINDOW = 0, 1   # the two streams of a pass's generator
BLOCKS_PER_WINDOW = 4


@dataclass(frozen=True)
class Run:
    """Rows [start, stop) of the split, in order."""

    start: int
    stop: int


@dataclass(frozen=True)
class Gather:
    """One row of the split per position."""

    rows: np.ndarray


Stretch = Union[Run, Gather]


class EpochOrder:
    """Which row of a split of ``rows`` rows sits at each position of an epoch."""

    def __init__(self, rows: int, shuffle: bool, seed: int | None, window_rows: int) -> None:
        if shuffle and window_rows < 1:
            raise ValueError(f"shuffle window must hold at least 1 row, got {window_rows}")
        self.rows = rows
        self.shuffle = shuffle
        # Every rank must draw the same order: an unseeded shuffle is seeded 0, not by the clock.
        self.seed = 0 if seed is None else int(seed) & 0xFFFFFFFF
        self.window_rows = window_rows
        self.block_rows = max(1, window_rows // BLOCKS_PER_WINDOW)

    def stretches(self, epoch: int, start: int, stop: int) -> Iterator[Stretch]:
        """The rows at positions [start, stop), in position order: unshuffled, runs of the split; shuffled,
        one gather per window at most."""
        if self.rows == 0:
            if stop > start:
                raise ValueError("the split has no rows to read")
            return
        position = start
        while position < stop:
            pass_index, offset = divmod(position, self.rows)
            end = min(stop - pass_index * self.rows, self.rows)
            if self.shuffle:
                yield from self._shuffled(epoch, pass_index, offset, end)
            else:
                yield Run(offset, end)
            position += end - offset

    def _shuffled(self, epoch: int, pass_index: int, start: int, stop: int) -> Iterator[Gather]:
        block = self.block_rows
        blocks = -(-self.rows // block)
        order = np.random.default_rng([self.seed, epoch, pass_index, _BLOCKS]).permutation(blocks)
        sizes = np.minimum(block, self.rows - order * block)      # the last block may be short
        laid_starts = np.concatenate([[0], np.cumsum(sizes)])
        window = self.window_rows
        for first in range(start // window * window, stop, window):
            length = min(window, self.rows - first)
            permutation = np.random.default_rng([self.seed, epoch, pass_index, _WINDOW, first // window]
                                                ).permutation(length)
            low, high = max(start, first) - first, min(stop, first + length) - first
            laid = permutation[low:high] + first                  # positions in the laid-out blocks
            slot = np.searchsorted(laid_starts, laid, side="right") - 1
            yield Gather(order[slot] * block + (laid - laid_starts[slot]))
