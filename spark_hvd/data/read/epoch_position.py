"""Rank child and driver: where an epoch stands in its row order, and how a formation of ranks deals the rest.

An epoch's rows have one order, a function of the seed and the epoch alone (epoch_order.py): position ``p``
of pass ``p // rows`` of the split. Positions are all a formation needs to agree on, so a position is a few
integers, whatever the data size:

- ``left``: the stretches of positions ``[start, stop)`` not trained yet (the whole pass, at the epoch's start);
- ``frontier``: the first position never dealt; positions from ``rows`` on are the next passes' rows, which
  pad an epoch whose steps need more rows than it has.

A formation of ``size`` ranks that runs ``steps`` more steps of ``batch`` rows each trains the next
``size * steps * batch`` positions: the first ones ``left`` holds, then, if they are too few, new ones from
the frontier (the padding). They are dealt in order, each rank a contiguous share of ``steps * batch``
positions, so a rank reads a compact part of the data. After ``k`` steps every rank has trained the first
``k * batch`` positions of its share; what ``left`` had beyond the deal stays left (the rows a training
epoch of whole batches leaves out, or the rest of a pass that ``train_steps_per_epoch`` cuts short).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

Interval = tuple[int, int]


def take_positions(intervals: Sequence[Interval], count: int) -> tuple[tuple[Interval, ...], tuple[Interval, ...]]:
    """(the first ``count`` positions of ``intervals``, the rest), both as intervals."""
    taken: list[Interval] = []
    rest: list[Interval] = []
    needed = count
    for start, stop in intervals:
        if needed <= 0:
            rest.append((start, stop))
            continue
        used = min(stop - start, needed)
        taken.append((start, start + used))
        if start + used < stop:
            rest.append((start + used, stop))
        needed -= used
    return tuple(taken), tuple(rest)


def split_positions(intervals: Sequence[Interval], count: int, parts: int) -> list[tuple[Interval, ...]]:
    """The first ``parts * count`` positions of ``intervals`` in ``parts`` runs of ``count``, in one walk."""
    out: list[tuple[Interval, ...]] = []
    current: list[Interval] = []
    needed = count
    for start, stop in intervals:
        while start < stop and len(out) < parts:
            used = min(stop - start, needed)
            if used:
                current.append((start, start + used))
            start += used
            needed -= used
            if needed == 0:
                out.append(tuple(current))
                current, needed = [], count
    while len(out) < parts:
        out.append(tuple(current))
        current = []
    return out


def merged(intervals: Sequence[Interval]) -> tuple[Interval, ...]:
    """``intervals`` sorted, empty ones dropped, touching ones joined."""
    out: list[Interval] = []
    for start, stop in sorted(i for i in intervals if i[1] > i[0]):
        if out and out[-1][1] >= start:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return tuple(out)


def interval_rows(intervals: Sequence[Interval]) -> int:
    return sum(stop - start for start, stop in intervals)


@dataclass(frozen=True)
class EpochPosition:
    """Where ``epoch`` stands: ``left`` (sorted, disjoint) is what it has not trained, ``frontier`` the first
    position not yet dealt, ``rows`` the rows of one pass over the split."""

    epoch: int
    rows: int
    left: tuple[Interval, ...]
    frontier: int

    @classmethod
    def fresh(cls, epoch: int, rows: int) -> "EpochPosition":
        """An epoch not started: the whole pass is left."""
        return cls(epoch, rows, ((0, rows),) if rows > 0 else (), rows)

    @property
    def rows_left(self) -> int:
        """Positions left, padding dealt but not trained included."""
        return interval_rows(self.left)

    @property
    def pass_rows_left(self) -> int:
        """Rows of the pass (positions below ``rows``) not trained yet: what the epoch's steps are for."""
        return sum(min(stop, self.rows) - start for start, stop in self.left if start < self.rows)

    def deal(self, size: int, steps: int, batch: int) -> "Deal":
        """The next ``steps`` steps of ``size`` ranks of ``batch`` rows: each rank's share, in rank order."""
        if size < 1 or steps < 0 or batch < 1:
            raise ValueError(f"cannot deal {steps} steps of {batch} rows among {size} ranks")
        share_rows = steps * batch
        needed = size * share_rows
        taken, rest = take_positions(self.left, needed)
        short = needed - interval_rows(taken)
        frontier = self.frontier
        if short:
            taken = (*taken, (frontier, frontier + short))
            frontier += short
        shares = tuple(split_positions(taken, share_rows, size))
        return Deal(self.epoch, self.rows, shares, rest, frontier, batch)

    def to_ints(self) -> list[int]:
        """The position as a flat list of integers (what a checkpoint or a commit keeps)."""
        return [self.epoch, self.rows, self.frontier, *(bound for interval in self.left for bound in interval)]

    @classmethod
    def from_ints(cls, values: Sequence[int]) -> "EpochPosition":
        epoch, rows, frontier, *bounds = (int(v) for v in values)
        if len(bounds) % 2:
            raise ValueError(f"an epoch position's intervals come in pairs, got {len(bounds)} bounds")
        return cls(epoch, rows, tuple(zip(bounds[::2], bounds[1::2])), frontier)


@dataclass(frozen=True)
class Deal:
    """One formation's shares of an epoch: ``shares[rank]`` are the positions that rank trains, in order;
    ``rest`` what was left and not dealt; ``frontier`` the first position not dealt after it."""

    epoch: int
    rows: int
    shares: tuple[tuple[Interval, ...], ...]
    rest: tuple[Interval, ...]
    frontier: int
    batch: int

    def share(self, rank: int) -> tuple[Interval, ...]:
        return self.shares[rank]

    def padding(self, rank: int) -> int:
        """Positions of ``rank``'s share beyond the pass: rows trained a second time (lockstep padding)."""
        return sum(stop - max(start, self.rows) for start, stop in self.shares[rank] if stop > self.rows)

    def after(self, steps: int) -> EpochPosition:
        """The epoch's position once every rank has trained ``steps`` of its share's batches."""
        done = steps * self.batch
        untrained = [interval for share in self.shares for interval in take_positions(share, done)[1]]
        return EpochPosition(self.epoch, self.rows, merged([*untrained, *self.rest]), self.frontier)


def epoch_origin(resume: EpochPosition | None, epoch: int, rows: int, size: int, steps: int, batch_size: int,
                 skip: int = 0) -> EpochPosition:
    """Where ``epoch`` stands for a formation of ``size`` ranks and ``steps`` steps an epoch that takes it
    up at step ``skip``: ``resume`` when it is that epoch's, else the fresh epoch with ``skip`` steps of
    this formation trained (a resume that carried no position)."""
    if resume is not None and resume.epoch == epoch:
        return resume
    fresh = EpochPosition.fresh(epoch, rows)
    return fresh.deal(size, steps, batch_size).after(skip) if skip else fresh
