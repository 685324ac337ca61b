"""Rank child: one split's batches for a rank's training loop, whichever framework consumes them.

torch's epoch loop, Keras's ``tf.data`` feed and Lightning's data module all draw their batches here:
exactly the plan's steps per epoch on every rank (lockstep, so uneven shards cannot desynchronise the
allreduce), the batches a resumed epoch already trained skipped, and ``transformation_fn`` applied. A
change to how batches are made (new column types, decoding ahead of the loop) is made here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from spark_hvd.data.transformation import apply_transformation


@dataclass(frozen=True)
class Transformation:
    """Horovod's ``transformation_fn`` with its ``transformation_edit_fields`` and ``_removed_fields``."""

    fn: Callable[[dict[str, Any]], dict[str, Any]]
    edit_fields: Sequence[Sequence[Any]] | None = None
    removed_fields: Sequence[str] | None = None

    def apply(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return apply_transformation(batch, self.fn, self.edit_fields, self.removed_fields)


class RankFeed:
    """``steps`` batches of ``reader`` an epoch, each after ``transformation`` (None: as read)."""

    def __init__(self, reader: Any, steps: int, transformation: Transformation | None = None) -> None:
        self.reader, self.steps, self.transformation = reader, steps, transformation

    def epoch(self, epoch: int, skip: int = 0) -> Iterator[dict[str, np.ndarray]]:
        """The epoch's batches after its first ``skip``, which are read (so the epoch's sequence is the
        reader's, whatever the resume point) but not transformed."""
        stream = iter(self.reader.batches(epoch))
        for _ in range(skip):
            next(stream)
        for _ in range(self.steps - skip):
            batch = next(stream)
            yield batch if self.transformation is None else self.transformation.apply(batch)

    def close(self) -> None:
        self.reader.close()
