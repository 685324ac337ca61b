"""The rank recipe's own part of each step and epoch (spark_hvd/recipe), framework-neutral: when an elastic
fit commits and a fit checkpoints inside an epoch, what a commit and a checkpoint hold, where a resumed epoch
is taken up at another size, and that a rank never imports pyspark to read its plan."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from spark_hvd.data.read.epoch_position import EpochPosition
from spark_hvd.recipe.epoch_events import EpochEvents
from spark_hvd.recipe.hooks import FrameworkHooks, Position, Records, Resume, WithinEpoch
from spark_hvd.recipe.plan import ElasticPlan, EpochSteps


class _Plan:
    """What EpochEvents reads of a FitPlan."""

    def __init__(self, elastic: ElasticPlan | None, every: int | None = None) -> None:
        self.elastic, self.checkpoint_every_steps = elastic, every
        self.epoch_steps = EpochSteps(384, 0, 32, 32, 1, True)
        self.data = SimpleNamespace(train_rows=384)
        self.batch_size = 32

    def steps_at(self, size: int) -> tuple[int, int]:
        return self.epoch_steps.at(size)


class _Progress:
    def __init__(self) -> None:
        self.steps, self.epochs, self.times = [], [], []

    def step(self, epoch: int, step: int, loss: float | None) -> None:
        self.steps.append((epoch, step))

    def epoch(self, epoch: int, metrics: dict, times: dict | None = None) -> None:
        self.epochs.append(epoch)
        self.times.append(times)


class _State:
    def __init__(self) -> None:
        self.epoch, self.step, self.lr_size, self.history, self.epoch_metrics = 0, 3, 2, [], []
        self.position = self.rng = self.sums = None
        self.commits: list[tuple[int, int, int]] = []
        self.positions: list = []

    def commit(self) -> None:
        self.commits.append((self.epoch, self.step, len(self.history)))
        self.positions.append(self.position)


class _Hooks(FrameworkHooks):
    carried_attributes = ("sums",)

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.saved: list[WithinEpoch] = []

    def init(self): ...
    def restore(self): ...
    def scale_learning_rate(self, factor: float) -> None: ...
    def run_epochs(self, start, events) -> None: ...
    def result(self, records, lr_factor): ...

    def save(self, epoch: int, records: Records, lr_factor: float, within: WithinEpoch | None = None) -> None:
        self.calls.append(("save", epoch, len(records.history), lr_factor))
        self.saved.append(within)

    def fill_commit(self, state) -> None:
        self.calls.append(("fill", getattr(state, "step", None)))
        state.sums = (state.sums or 0) + 1

    def fill_epoch_commit(self, state) -> None:
        self.calls.append(("fill_epoch", state.epoch))


def _elastic_plan(commit_steps: int = 2) -> ElasticPlan:
    # 384 rows, 32 a batch, 2 ranks: 6 steps an epoch.
    return ElasticPlan(commit_steps, 1, 2, EpochSteps(384, 0, 32, 32, 1, True))


def test_commits_fall_on_multiples_of_the_commit_steps_and_not_on_the_epochs_last_step() -> None:
    hooks, state, progress = _Hooks(), _State(), _Progress()
    # Resumed mid-epoch after step 3 (a re-formation from another size), with that formation's position.
    resumed = EpochPosition.fresh(0, 384).deal(3, 4, 32).after(1)
    events = EpochEvents(hooks, _Plan(_elastic_plan()), progress, 2, Records(), 1, state=state,
                         start=Position(0, 3, resumed))
    assert events.train_steps == 6
    for done in (4, 5, 6):
        events.step_done(0, done, 0.5)
    events.epoch_done(0, {"epoch": 0}, {"loss": 0.5})
    # Step 4, then none at step 6 (the epoch's last): the epoch-end commit holds the validated epoch.
    assert state.commits == [(0, 4, 0), (1, 0, 1)]
    assert hooks.calls == [("fill", 3), ("save", 0, 1, 2), ("fill_epoch", 1)]
    assert progress.steps == [(0, 4), (0, 5), (0, 6)] and progress.epochs == [0]
    assert state.epoch_metrics == [{"epoch": 0, "loss": 0.5}]
    # The commit's position: the resumed one, one step of 2 ranks further; none at the epoch's end.
    assert state.positions == [resumed.deal(2, 3, 32).after(1).to_ints(), None]
    assert state.rng is not None and len(state.rng) == 1
    assert state.sums is None                                        # the next epoch carries nothing yet


def test_a_static_fit_keeps_its_records_and_never_commits() -> None:
    hooks, progress = _Hooks(), _Progress()
    records = Records([{"epoch": 0}], [{"epoch": 0, "loss": 1.0}])     # resumed after epoch 0
    events = EpochEvents(hooks, _Plan(None), progress, 2, records, 4, start=Position(1))
    for done in range(1, 7):
        events.step_done(1, done, None)
    events.epoch_done(1, {"epoch": 1}, {"loss": 0.25})
    assert hooks.calls == [("save", 1, 2, 4)]
    assert events.records.epoch_metrics == [{"epoch": 0, "loss": 1.0}, {"epoch": 1, "loss": 0.25}]
    # Every row once: 384 rows of 6 steps of 2 x 32.
    assert (events.records.epoch_times[0]["padded_rows"], events.records.epoch_times[0]["left_out_rows"]) == (0, 0)
    within = hooks.saved[0]
    assert (within.epoch, within.step, within.size, within.position) == (2, 0, 2, None) and len(within.rng) == 1


def test_a_fit_checkpoints_every_n_steps_inside_its_epochs_with_the_position_and_the_sums() -> None:
    hooks, progress = _Hooks(), _Progress()
    events = EpochEvents(hooks, _Plan(None, every=4), progress, 2, Records(), 2)
    for done in range(1, 7):
        events.step_done(0, done, None)
    events.epoch_done(0, {"epoch": 0}, {"loss": 0.25})
    assert hooks.calls == [("fill", None), ("save", -1, 0, 2), ("save", 0, 1, 2)]
    within = hooks.saved[0]
    assert (within.epoch, within.step, within.size, within.carried) == (0, 4, 2, {"sums": 1})
    assert within.position == EpochPosition.fresh(0, 384).deal(2, 6, 32).after(4).to_ints()
    assert WithinEpoch.from_bytes(within.to_bytes()).position == within.position
    assert events.carry.sums is None                                 # the next epoch carries nothing yet


@pytest.mark.parametrize("size, step", [(2, 4), (3, 2), (1, 8), (4, 2)])
def test_a_checkpoint_inside_an_epoch_is_taken_up_where_its_rows_left_take_the_steps_left(size, step) -> None:
    from spark_hvd.recipe.resume_point import start_position

    steps = EpochSteps(384, 0, 32, 32, 1, True)                      # 6 steps on 2 ranks, 4 on 3, 12 on 1, 3 on 4
    position = EpochPosition.fresh(0, 384).deal(2, 6, 32).after(4)   # 4 of 6 done: 128 rows left
    start = start_position(steps, Resume(0, within=WithinEpoch(0, 4, 2, position.to_ints())), size)
    assert (start.epoch, start.step, start.data) == (0, step, position)
    train = steps.at(size)[0]
    deal = position.deal(size, train - step, 32)
    trained = sorted(p for rank in range(size) for a, b in deal.share(rank) for p in range(a, b))
    assert trained[:128] == [p for a, b in position.left for p in range(a, b)]
    assert start_position(steps, Resume(1), size) == Position(1)


def test_the_rank_side_of_a_fit_imports_no_pyspark() -> None:
    """What a rank imports to unpickle its plan and run the recipe never loads Spark's modules."""
    code = ("import sys, spark_hvd.recipe.rank_recipe, spark_hvd.recipe.plan, spark_hvd.recipe.rank_progress, "
            "spark_hvd.recipe.nonfinite, spark_hvd.torch.trainer, spark_hvd.torch.epoch_loop, "
            "spark_hvd.torch.batch_tensors, spark_hvd.data.feed.transformation, spark_hvd.data.read.readers, "
            "spark_hvd.keras.trainer, spark_hvd.keras.rank.feed, spark_hvd.lightning.trainer, "
            "spark_hvd.lightning.data_module, spark_hvd.lightning.strategy; "
            "print([m for m in sys.modules if m.startswith('pyspark')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_a_rank_takes_up_its_own_generators_only_from_as_many_ranks() -> None:
    import random

    import numpy as np
    import torch

    from spark_hvd.recipe import rng_states

    def draws() -> tuple:
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    torch.manual_seed(1)
    saved = [rng_states.capture(), None]
    expected = draws()
    draws()
    assert rng_states.restore_own(saved, 0, 2) and draws() == expected
    assert not rng_states.restore_own(saved, 0, 3) and draws() != expected   # another size: drawn anew
    assert not rng_states.restore_own(None, 0, 2)
