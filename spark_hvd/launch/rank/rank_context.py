"""Rank child: what a rank knows about itself inside ``fn``: ``spark_hvd.rank_context()``.

The values come from Spark (task address, GPU addresses) and from the launch's single
allGather (local and cross ranks, by physical host), so they are available before, and
independently of, ``collective.init()``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RankContext:
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    task_address: str                 # "host:port" of the executor running this rank's task
    task_addresses: tuple[str, ...]   # every rank's, in rank order
    gpu_addresses: tuple[str, ...]    # as Spark assigned them (before CUDA_VISIBLE_DEVICES mapping)
    stage_id: int
    task_attempt_id: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RankContext":
        data = dict(data)
        for name in ("task_addresses", "gpu_addresses"):
            data[name] = tuple(data[name])
        return cls(**data)


_current: RankContext | None = None


def rank_context() -> RankContext:
    """This rank's context; only inside a function started by ``spark_hvd.run``."""
    if _current is None:
        raise RuntimeError("spark_hvd.rank_context() is only available inside fn run by spark_hvd.run")
    return _current


def set_rank_context(context: RankContext) -> None:
    """Called once by the child before fn runs."""
    global _current
    _current = context
