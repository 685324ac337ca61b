"""ShardReader: a rank's exactly-sized batches of one split, for its share of an epoch's row order."""

from __future__ import annotations

import math
from typing import Iterator, Sequence

import numpy as np

from spark_hvd.data.columns import ColumnSpec
from spark_hvd.data.read.epoch_position import EpochPosition, Interval
from spark_hvd.data.read.row_chunks import Chunk, RowQueue
from spark_hvd.errors import ShardReadError


class ShardReader:
    """Base of the readers. An ``exact`` reader reads any stretch of an epoch's order (``_read``), so a rank
    trains exactly its share of what a formation deals (epoch_position.py); one that is not (Petastorm)
    reads its own shard's endless stream (``batches``)."""

    exact = True

    def __init__(self, specs: list[ColumnSpec], rows: int, *, rank: int, size: int, split: str, batch_size: int,
                 shuffle: bool, seed: int | None, shuffle_buffer_rows: int) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if shuffle and shuffle_buffer_rows < 1:
            raise ValueError(f"shuffle_buffer_rows must be at least 1, got {shuffle_buffer_rows}")
        if rows < 1:
            raise ShardReadError(f"rank {rank}: its {split} shard is empty; there is nothing to read")
        self.specs = specs
        self.rows = rows                  # an exact reader's: the split's; otherwise this rank's shard's
        self.rank, self.size = rank, size
        self.split = split
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.shuffle_buffer_rows = shuffle_buffer_rows

    def epoch_batches(self, origin: EpochPosition, steps: int) -> Iterator[dict[str, np.ndarray]]:
        """This rank's ``steps`` batches of the deal of ``origin`` among the reader's ranks."""
        deal = origin.deal(self.size, steps, self.batch_size)
        return self.share_batches(origin.epoch, deal.share(self.rank))

    def share_batches(self, epoch: int, share: Sequence[Interval]) -> Iterator[dict[str, np.ndarray]]:
        """The rows at ``share``'s positions of ``epoch``'s order, in order, as batch_size-row batches (a
        share holds whole batches)."""
        queue = RowQueue()
        for start, stop in share:
            for chunk in self._read(epoch, start, stop):
                queue.append(chunk)
                while queue.rows >= self.batch_size:
                    yield queue.take(self.batch_size)

    def batches(self, epoch: int, steps: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        """This rank's batches of a whole epoch: ``steps`` of them (default: the lockstep count that covers
        the split, ceil(rows / (size * batch_size)))."""
        if steps is None:
            steps = max(1, math.ceil(self.rows / (self.size * self.batch_size)))
        return self.epoch_batches(EpochPosition.fresh(epoch, self.rows), steps)

    def close(self) -> None:
        """Release files and readers; subclasses that hold any override it."""

    def _read(self, epoch: int, start: int, stop: int) -> Iterator[Chunk]:
        """The rows at positions [start, stop) of ``epoch``'s order, in order."""
        raise NotImplementedError

    def __enter__(self) -> "ShardReader":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
