"""Rank child: an epoch's time split of every rank, combined into the fit's record (one allgather an epoch).

The record of an epoch, the same for every framework (``model.getEpochTimes()``, and the driver's progress
line)::

    {"epoch": 0, "input_s": 0.8, "compute_s": 4.1, "communication_s": 1.2, "slowest_rank": 1, "ranks": 2,
     "padded_rows": 12, "left_out_rows": 0}

``input_s``, ``compute_s`` and ``communication_s`` are averaged over the ranks (epoch_clock.py says what
each holds); ``slowest_rank`` is the rank whose own work (input and compute) took longest: in lockstep
training the other ranks wait for it in the allreduce, so their communication share holds its lateness.
The row counts come from the epoch's data position (EpochEvents adds them).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from spark_hvd.recipe.epoch_clock import RankTimes

# What the rank functions of every framework name their one gather of an epoch's times.
GATHER_NAME = "shvd.epoch_times"


def epoch_times_record(epoch: int, ranks: Sequence[RankTimes]) -> dict[str, Any]:
    """The record of ``epoch`` from every rank's split, in rank order."""
    if not ranks:
        raise ValueError("an epoch's times need at least one rank's")
    count = len(ranks)
    slowest = max(range(count), key=lambda rank: ranks[rank].busy_s)
    return {"epoch": epoch,
            "input_s": sum(r.input_s for r in ranks) / count,
            "compute_s": sum(r.compute_s for r in ranks) / count,
            "communication_s": sum(r.communication_s for r in ranks) / count,
            "slowest_rank": slowest, "ranks": count}


def gathered_times(gather: Callable[[Any], list[Any]] | None, mine: RankTimes) -> list[RankTimes]:
    """Every rank's split, in rank order: ``gather`` is the framework's ``allgather_object`` (None: this rank
    alone). Called by every rank at the same point of the epoch's end."""
    if gather is None:
        return [mine]
    values = gather((mine.input_s, mine.compute_s, mine.communication_s))
    return [RankTimes(*map(float, value)) for value in values]


def shares(record: dict[str, Any]) -> tuple[float, float, float] | None:
    """Driver and rank: (input, compute, communication) as fractions of their sum; None when it is 0."""
    parts = [float(record.get(key, 0.0)) for key in ("input_s", "compute_s", "communication_s")]
    total = sum(parts)
    if total <= 0:
        return None
    return parts[0] / total, parts[1] / total, parts[2] / total
