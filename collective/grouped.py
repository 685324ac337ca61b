"""Grouped collectives, in the rank process: several tensors negotiated as one unit, so no member runs
before every member is ready on every rank. Shared by the numpy API and the framework adapters."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Sequence

from collective._native import CollectiveKind, DType

# Members of one group share an id; ranks make grouped calls in the same order, so a per-process
# counter gives the same id everywhere.
_group_ids = itertools.count()


@dataclass(frozen=True)
class Member:
    """One tensor of a group, as the engine takes it."""
    name: str | None
    tensor: Any                         # a buffer, or an address (then shape is required)
    dtype: DType
    shape: Sequence[int] | None = None


def member_names(name: str | None, count: int) -> list[str | None]:
    """Horovod's member names, ``name.0``, ``name.1``...; automatic names when the group is unnamed."""
    return [f"{name}.{i}" for i in range(count)] if name else [None] * count


def submit_group(engine: Any, kind: CollectiveKind, members: Sequence[Member], **options: Any) -> list[tuple[int, DType]]:
    """Submits ``members`` as one group (``options`` as for ``Engine.submit``) and returns
    ``(handle, dtype)`` per member, for ``collective.engine.wait_all``. The memory behind every
    member must stay valid until its handle completes."""
    # The engine fuses a group into one buffer of one dtype, so a mixed group goes as one group per dtype.
    codes = [m.dtype for m in members]
    groups = {code: (next(_group_ids), codes.count(code)) for code in dict.fromkeys(codes)}
    return [
        (engine.submit(kind, m.name, m.tensor, m.dtype, m.shape, group=groups[m.dtype][0],
                       group_size=groups[m.dtype][1], **options), m.dtype)
        for m in members
    ]
