"""Rank child: where a resumed epoch is taken up at the number of ranks there is now.

A checkpoint or commit made inside an epoch says how many steps were done at what size, and where the
epoch's data stands (data/read/epoch_position.py): which positions of its order no step has trained. At the
same size training goes on at the same step, and the feed deals the very same rest. At another size the
steps an epoch has change: it resumes at the step from which the steps left are as many as its untrained
rows take at the new size (``EpochSteps.resumed_step``), and the feed deals those rows among the new ranks,
so that every row of the epoch is trained once.
"""

from __future__ import annotations

from typing import Any, Sequence

from spark_hvd.data.read.epoch_position import EpochPosition, epoch_origin
from spark_hvd.recipe.hooks import Position, Resume
from spark_hvd.recipe.plan import EpochSteps


def data_position(steps: EpochSteps, epoch: int, done: int, done_size: int,
                  position: Sequence[int] | None) -> EpochPosition | None:
    """The epoch's data position after ``done`` steps at ``done_size`` ranks: the one kept, else (none was)
    the fresh epoch's as that formation dealt it; None at the epoch's start."""
    if position is not None:
        return EpochPosition.from_ints(position)
    if done == 0:
        return None
    return epoch_origin(None, epoch, steps.train_rows, done_size, steps.at(done_size)[0], steps.batch_size, done)


def resumed_step(steps: EpochSteps, epoch: int, done: int, done_size: int, position: Sequence[int] | None,
                 size: int) -> int:
    """The step at which ``size`` ranks take up an epoch that ``done_size`` ranks left after ``done`` steps."""
    if done == 0 or done_size == size:
        return done
    data = data_position(steps, epoch, done, done_size, position)
    return steps.resumed_step(done, data.pass_rows_left, size)


def start_position(steps: EpochSteps | None, resume: Resume, size: int) -> Position:
    """Where a fit of ``size`` ranks starts from what rank 0 restored: an epoch's start, or inside the epoch
    a checkpoint was written in."""
    within = resume.within
    if within is None or within.step == 0 or steps is None:
        return Position(resume.first_epoch)
    data = data_position(steps, within.epoch, within.step, within.size, within.position)
    return Position(within.epoch, resumed_step(steps, within.epoch, within.step, within.size, within.position,
                                               size), data)


def own_rng(resume: Resume) -> list[Any] | None:
    """Every rank's generators as the checkpoint kept them (None: it kept none)."""
    return resume.within.rng if resume.within is not None else None
