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


def groups_by_dtype(dtypes: Sequence[Any]) -> list[tuple[int, int]]:
    """``(group id, group size)`` for each member of one grouped call, given the members' dtypes. The
    engine fuses a group into one buffer of one dtype, so a mixed group goes as one group per dtype. Every
    framework takes its ids here: one counter per process keeps them unique when a process mixes them."""
    ids = {dtype: (next(_group_ids), dtypes.count(dtype)) for dtype in dict.fromkeys(dtypes)}
    return [ids[dtype] for dtype in dtypes]


def submit_group(engine: Any, kind: CollectiveKind, members: Sequence[Member], **options: Any) -> list[tuple[int, DType]]:
    """Submits ``members`` as one group (``options`` as for ``Engine.submit``) and returns
    ``(handle, dtype)`` per member, for ``collective.engine.wait_all``. The memory behind every
    member must stay valid until its handle completes."""
    groups = groups_by_dtype([m.dtype for m in members])
    return [
        (engine.submit(kind, m.name, m.tensor, m.dtype, m.shape, group=group, group_size=group_size, **options),
         m.dtype)
        for m, (group, group_size) in zip(members, groups)
    ]
