"""Rank child: one split's batches for a rank's training loop, whichever framework consumes them.

torch's epoch loop, Keras's ``tf.data`` feed and Lightning's data module all draw their batches here:
exactly the plan's steps per epoch on every rank (lockstep, so uneven shards cannot desynchronise the
allreduce), the batches a resumed epoch already trained skipped, and ``transformation_fn`` applied. A
change to how batches are made (new column types, decoding ahead of the loop) is made here once.

An epoch's batches are this rank's share of what its formation deals of the epoch's order
(data/read/epoch_position.py): the whole epoch, or for the epoch a checkpoint or commit resumes, what that
position left, so that the rows of the epoch are trained once whatever the number of ranks before and after.

With ``workers`` > 0 and a transformation, the transformation runs in that many decode worker processes
ahead of the loop (decode_pool.py): the batches and their order are the same as with ``workers=0``, where it
runs in the loop itself. An error of the transformation names where it happened either way.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from spark_hvd.data.feed.decode_pool import DEFAULT_BATCHES_PER_WORKER, BatchPlace, DecodePool, add_note
from spark_hvd.data.feed.transformation import RowCounter, apply_transformation
from spark_hvd.data.read.epoch_position import EpochPosition, epoch_origin


@dataclass(frozen=True)
class Transformation:
    """Horovod's ``transformation_fn`` with its ``transformation_edit_fields`` and ``_removed_fields``.

    ``fn`` takes a row, or the whole batch where it is a ``BatchTransformation`` (transformation.py)."""

    fn: Callable[[dict[str, Any]], dict[str, Any]]
    edit_fields: Sequence[Sequence[Any]] | None = None
    removed_fields: Sequence[str] | None = None

    def apply(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return apply_transformation(batch, self.fn, self.edit_fields, self.removed_fields)


class RankFeed:
    """``steps`` batches of ``reader`` an epoch, each after ``transformation`` (None: as read).

    ``workers``: decode worker processes that run the transformation ahead of the loop (0: in the loop);
    ``batches_per_worker``: the batches in flight per worker, which bound the feed's memory; ``resume``: where
    a resumed epoch stands (None: every epoch starts whole)."""

    def __init__(self, reader: Any, steps: int, transformation: Transformation | None = None, workers: int = 0,
                 batches_per_worker: int = DEFAULT_BATCHES_PER_WORKER, resume: EpochPosition | None = None) -> None:
        if workers < 0:
            raise ValueError(f"workers must be 0 or more, got {workers}")
        self.reader, self.steps, self.transformation = reader, steps, transformation
        self.resume = resume
        self.workers = workers if transformation is not None else 0
        self.batches_per_worker = batches_per_worker
        self.split = str(getattr(reader, "split", "train"))
        self._pool: DecodePool | None = None

    @property
    def pool(self) -> DecodePool | None:
        """The decode workers (None with workers=0), started by the first epoch."""
        if self._pool is None and self.workers:
            self._pool = DecodePool(self.transformation, self.workers, rank=getattr(self.reader, "rank", None),
                                    split=self.split, batches_per_worker=self.batches_per_worker)
        return self._pool

    def epoch(self, epoch: int, skip: int = 0) -> Iterator[dict[str, np.ndarray]]:
        """The epoch's batches after its first ``skip``: what the resume position left of the epoch when it
        is the resumed one, else the epoch from its start with ``skip`` steps of this size trained. A reader
        that cannot read a position (Petastorm) reads the skipped batches and drops them."""
        stream, first_row = self._stream(epoch, skip)
        if self.transformation is not None and self.workers:
            if self.steps > skip:
                yield from self.pool.imap(self._placed(stream, epoch, skip, first_row), self.steps - skip)
            return
        for index in range(skip, self.steps):
            batch = next(stream)
            if self.transformation is None:
                yield batch
                continue
            rows, t = _rows(batch), self.transformation
            counted = None if getattr(t.fn, "per_batch", False) else RowCounter(t.fn)
            try:
                transformed = apply_transformation(batch, counted or t.fn, t.edit_fields, t.removed_fields)
            except Exception as exc:
                row = counted.row if counted is not None and 0 <= counted.row < rows else None
                place = BatchPlace(self.split, epoch, index, first_row, rows)
                add_note(exc, "spark_hvd: transformation_fn raised this on "
                              + place.describe(row, _path(batch, row), path_of_row=row is not None))
                raise
            first_row += rows
            yield transformed

    def origin(self, epoch: int, skip: int = 0) -> EpochPosition:
        """Where ``epoch`` stands when this feed's formation takes it up after ``skip`` of its steps."""
        return epoch_origin(self.resume, epoch, self.reader.rows, self.reader.size, self.steps,
                            self.reader.batch_size, skip)

    def _stream(self, epoch: int, skip: int) -> tuple[Iterator[dict[str, np.ndarray]], int]:
        """(the epoch's batches from step ``skip`` on, the rows before them on this rank)."""
        if getattr(self.reader, "exact", False):
            stream = self.reader.epoch_batches(self.origin(epoch, skip), self.steps - skip)
            return stream, skip * self.reader.batch_size
        if skip and self.resume is not None and self.resume.epoch == epoch and \
                self.resume != epoch_origin(None, epoch, self.resume.rows, self.reader.size, self.steps,
                                            self.reader.batch_size, skip):
            warnings.warn(f"rank {self.reader.rank}: reader={type(self.reader).__name__} shards by rank, so the "
                          f"{skip} steps it skips of epoch {epoch} are not exactly the rows its checkpoint or "
                          "commit trained at another number of ranks; reader='arrow' trains every row once")
        stream = iter(self.reader.batches(epoch))
        first_row = 0
        for _ in range(skip):
            first_row += _rows(next(stream))
        return stream, first_row

    def _placed(self, stream: Iterator[dict[str, np.ndarray]], epoch: int, index: int,
                first_row: int) -> Iterator[tuple[BatchPlace, dict[str, np.ndarray]]]:
        for batch in stream:
            rows = _rows(batch)
            yield BatchPlace(self.split, epoch, index, first_row, rows), batch
            index += 1
            first_row += rows

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        self.reader.close()


def _rows(batch: dict[str, np.ndarray]) -> int:
    return len(next(iter(batch.values()))) if batch else 0


def _path(batch: dict[str, Any], row: int | None) -> str | None:
    """The row's value of a ``path`` column (Spark's binaryFile source has one); its first row's without a row."""
    paths = batch.get("path")
    return None if paths is None or not len(paths) else str(paths[row if row is not None else 0])
