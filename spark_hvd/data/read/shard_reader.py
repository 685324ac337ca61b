"""ShardReader: a rank's endless, exactly-sized batches over its shard of one split."""

from __future__ import annotations

import itertools
from typing import Iterator

import numpy as np

from spark_hvd.data.columns import ColumnSpec
from spark_hvd.data.read.row_chunks import Chunk, RowQueue, chunk_rows, shuffled
from spark_hvd.errors import ShardReadError


class ShardReader:
    """Base of the Arrow and Petastorm readers; subclasses read one pass over the shard in _read_pass."""

    def __init__(self, specs: list[ColumnSpec], rows: int, *, rank: int, split: str, batch_size: int,
                 shuffle: bool, seed: int | None, shuffle_buffer_rows: int) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if shuffle and shuffle_buffer_rows < 1:
            raise ValueError(f"shuffle_buffer_rows must be at least 1, got {shuffle_buffer_rows}")
        if rows < 1:
            raise ShardReadError(f"rank {rank}: its {split} shard is empty; there is nothing to read")
        self.specs = specs
        self.rows = rows                  # rows in this rank's shard
        self.rank = rank
        self.split = split
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.shuffle_buffer_rows = shuffle_buffer_rows

    def batches(self, epoch: int) -> Iterator[dict[str, np.ndarray]]:
        """An endless stream of batch_size-row batches for this epoch, wrapping around the shard.

        Each pass over the shard is reshuffled from (seed, epoch, pass); the caller takes as many batches
        as the agreed steps per epoch, so every rank runs the same number of steps.
        """
        queue = RowQueue()
        for pass_index in itertools.count():
            rng = np.random.default_rng(None if self.seed is None else [self.seed & 0xFFFFFFFF, epoch, pass_index])
            chunks = self._read_pass(rng if self.shuffle else None)
            if self.shuffle:
                chunks = shuffled(chunks, rng, self.shuffle_buffer_rows)
            read = 0
            for chunk in chunks:
                read += chunk_rows(chunk)
                queue.append(chunk)
                while queue.rows >= self.batch_size:
                    yield queue.take(self.batch_size)
            self._check_pass(read, epoch, pass_index)

    def close(self) -> None:
        """Release files and readers; subclasses that hold any override it."""

    def _read_pass(self, rng: np.random.Generator | None) -> Iterator[Chunk]:
        raise NotImplementedError

    def _check_pass(self, read: int, epoch: int, pass_index: int) -> None:
        if read != self.rows:
            raise ShardReadError(
                f"rank {self.rank}: a pass over its {self.split} shard returned {read} rows, but the shard "
                f"holds {self.rows} (epoch {epoch}, pass {pass_index}); the reader lost data, and training "
                "would desynchronise the ranks")

    def __enter__(self) -> "ShardReader":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

