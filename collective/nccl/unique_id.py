"""NCCL's unique id, made on rank 0 and broadcast to every rank over the existing communicator."""

from __future__ import annotations

from typing import Callable

import numpy as np

UNIQUE_ID_BYTES = 128


def exchange_unique_id(make_id: Callable[[], bytes], rank: int, name: str = "nccl.unique_id") -> bytes:
    """Rank 0's ``make_id()`` on every rank: a 128-byte broadcast on the job's communicator (the native
    ring or MPI, directly or through the engine, whichever is running)."""
    from collective.ops import broadcast_  # the layer above the NCCL loader: imported when used

    buffer = np.zeros(UNIQUE_ID_BYTES, np.uint8)
    if rank == 0:
        made = bytes(make_id())
        if len(made) != UNIQUE_ID_BYTES:
            raise ValueError(f"an NCCL unique id is {UNIQUE_ID_BYTES} bytes, got {len(made)}")
        buffer[:] = np.frombuffer(made, np.uint8)
    broadcast_(buffer, root_rank=0, name=name)
    return buffer.tobytes()
