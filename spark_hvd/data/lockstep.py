"""Lockstep: every rank runs the same number of steps per epoch, agreed from the row counts alone.

The count depends only on numbers every rank already has (the split's total rows from the materialisation
metadata, the world size, the batch size), so no rank waits in an allreduce for a rank that ran out of data:
readers wrap around their shard and each rank takes exactly this many batches.
"""

from __future__ import annotations

import math


def steps_per_epoch(total_rows: int, size: int, batch_size: int, requested: int | None = None,
                    whole_batches_only: bool = False) -> int:
    """`requested` if given, else the steps of one pass over the split: ceil(rows / (size * batch)), or
    with `whole_batches_only` floor(...) (Horovod's rule for training epochs), at least 1 either way."""
    if size < 1 or batch_size < 1:
        raise ValueError(f"size and batch_size must be at least 1, got size={size}, batch_size={batch_size}")
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise ValueError(f"steps per epoch must be a positive integer, got {requested!r}")
        return requested
    if total_rows < 0:
        raise ValueError(f"total_rows must not be negative, got {total_rows}")
    steps = total_rows // (size * batch_size) if whole_batches_only else math.ceil(total_rows / (size * batch_size))
    return max(1, steps)
