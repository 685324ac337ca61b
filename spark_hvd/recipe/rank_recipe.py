"""Rank child: the one sequence every rank of an estimator's fit runs, whatever the framework.

1. init (the framework's collective, device, seeds, model);
2. rank 0 restores the run's last checkpoint, if any;
3. what it restored is broadcast (the epoch to start from, the records so far, and for a checkpoint inside
   an epoch where in it: resume_point.py takes it up at this number of ranks);
4. the learning rate is scaled by the number of ranks (``learning_rate_scaling='linear'``, Horovod's rule);
5. rank 0's parameters and optimizer state are broadcast;
6. the optimizer is wrapped in the framework's DistributedOptimizer;
7. each rank takes up its random generators where the checkpoint kept them at this size (rng_states.py),
   and the epochs run, the framework's loop telling ``EpochEvents`` of each step and epoch;
8. after each epoch, the ranks' time split is gathered (epoch_times.py), the checkpoint written (rank 0
   writes it) and, in an elastic fit, a commit made; every ``checkpoint_every_steps`` steps too;
9. rank 0 returns what the driver builds the model from, with the epochs' time split.

An elastic fit (``plan.elastic``) runs step 7 under ``hvd.elastic.run``: the same epochs, with commits, and
on a re-formation entered again from the last commit at the new size (formation.py).
"""

from __future__ import annotations

from typing import Any

from spark_hvd.recipe import rng_states
from spark_hvd.recipe.epoch_events import EpochEvents
from spark_hvd.recipe.epoch_times import GATHER_NAME
from spark_hvd.recipe.formation import enter_formation, initial_state_attrs
from spark_hvd.recipe.hooks import FrameworkHooks, Position, Records, Resume
from spark_hvd.recipe.plan import FitPlan
from spark_hvd.recipe.resume_point import own_rng, start_position


# What every framework's rank imports to run the recipe and read its shard: an estimator's spare rank process
# (spark_hvd.run's keep_warm) imports them with the framework, so that the launch does not wait for pyarrow.
RANK_MODULES = ("spark_hvd.recipe.rank_recipe", "spark_hvd.recipe.rank_progress", "spark_hvd.data.feed.rank_feed",
                "spark_hvd.data.read.readers")


class RecipeRankFn:
    """The picklable function ``spark_hvd.run`` runs on every rank: the recipe over ``hooks_type(spec)``, where
    ``spec`` (a framework's rank spec) carries the plan and the framework's objects."""

    def __init__(self, hooks_type: type[FrameworkHooks], spec: Any) -> None:
        self.hooks_type, self.spec = hooks_type, spec

    def __call__(self) -> dict[str, Any] | None:
        return run_rank(self.hooks_type(self.spec), self.spec.plan)


def learning_rate_factor(plan: FitPlan, size: int) -> int:
    """What the ranks' learning rate is the user's times: Horovod's linear rule, or 1."""
    return size if plan.learning_rate_scaling == "linear" else 1


def run_rank(hooks: FrameworkHooks, plan: FitPlan) -> dict[str, Any] | None:
    """Trains this rank's part of the fit; rank 0 (of the last formation) returns ``hooks.result``."""
    from spark_hvd.recipe.rank_progress import RankProgress

    try:
        hvd = hooks.init()
        rank, size = hvd.rank(), hvd.size()
        restored = hooks.restore() if rank == 0 else None
        resume: Resume = hvd.broadcast_object(restored or Resume(), root_rank=0, name="shvd.resume")
        hooks.adopt(resume)
        factor = learning_rate_factor(plan, size)
        hooks.scale_learning_rate(factor)
        hooks.broadcast_parameters()
        hooks.wrap_optimizer()
        progress = RankProgress(rank)
        progress.start(resume.first_epoch)
        start = start_position(plan.epoch_steps, resume, size)
        rng_states.restore_own(own_rng(resume), rank, size, hooks.rng_model())
        extra: dict[str, Any] = {}
        if plan.elastic is None:
            carried = resume.within.carried if start.step else None
            events = EpochEvents(hooks, plan, progress, size, resume.records, factor, gather=_gather(hvd),
                                 start=start, carried=carried)
            hooks.run_epochs(start, events)
            records = events.records
        else:
            records, factor, extra["reformations"] = _run_elastic(hooks, plan, hvd, resume, start, progress)
        if hvd.rank() != 0:
            return None
        return {**hooks.result(records, factor), "epoch_times": list(records.epoch_times), **extra}
    finally:
        hooks.close()


def _run_elastic(hooks: FrameworkHooks, plan: FitPlan, hvd: Any, resume: Resume, start: Position,
                 progress: Any) -> tuple[Records, float, list[dict[str, int]]]:
    """Step 7 under ``hvd.elastic.run``: (the records, the learning rate factor at the end, the re-formations)."""
    from spark_hvd.data.read.epoch_position import EpochPosition

    elastic = plan.elastic
    linear = plan.learning_rate_scaling == "linear"
    size = hvd.size()
    attrs = initial_state_attrs(elastic, size, start, linear, own_rng(resume))
    # Committed and restored with the rest of the records.
    attrs["epoch_times"] = list(resume.records.epoch_times)
    attrs.update({name: None for name in hooks.carried_attributes})
    if start.step:
        attrs.update(resume.within.carried)
    state = hooks.elastic_state(resume.records, attrs)

    def restore_rng(states: list[Any] | None) -> None:
        rng_states.restore_own(states, hvd.rank(), hvd.size(), hooks.rng_model())

    @hvd.elastic.run
    def train(state: Any) -> None:
        enter_formation(state, hvd.size(), elastic, hooks.scale_learning_rate, linear, restore_rng)
        data = EpochPosition.from_ints(state.position) if state.position is not None else None
        position = Position(state.epoch, state.step, data)
        events = EpochEvents(hooks, plan, progress, hvd.size(), Records(), state.lr_size, state=state,
                             gather=_gather(hvd), start=position)
        hooks.run_epochs(position, events)

    train(state)
    return Records(state.history, state.epoch_metrics, state.epoch_times), state.lr_size, state.reformations


def _gather(hvd: Any) -> Any:
    """Every rank's object of the current formation, in rank order (the framework's allgather_object)."""
    def gather(obj: Any, name: str = GATHER_NAME) -> list[Any]:
        return hvd.allgather_object(obj, name=name)
    return gather
