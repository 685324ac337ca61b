"""The rank recipe's own part of each step and epoch (spark_hvd/recipe), framework-neutral: when an elastic
fit commits, what a commit and a checkpoint hold, and that a rank never imports pyspark to read its plan."""

from __future__ import annotations

import subprocess
import sys

from spark_hvd.recipe.epoch_events import EpochEvents
from spark_hvd.recipe.hooks import FrameworkHooks, Records
from spark_hvd.recipe.plan import ElasticPlan, EpochSteps


class _Plan:
    """The two things EpochEvents reads of a FitPlan."""

    def __init__(self, elastic: ElasticPlan) -> None:
        self.elastic = elastic

    def steps_at(self, size: int) -> tuple[int, int]:
        return self.elastic.steps.at(size)


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
        self.commits: list[tuple[int, int, int]] = []

    def commit(self) -> None:
        self.commits.append((self.epoch, self.step, len(self.history)))


class _Hooks(FrameworkHooks):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def init(self): ...
    def restore(self): ...
    def scale_learning_rate(self, factor: float) -> None: ...
    def run_epochs(self, start, events) -> None: ...
    def result(self, records, lr_factor): ...

    def save(self, epoch: int, records: Records, lr_factor: float) -> None:
        self.calls.append(("save", epoch, len(records.history), lr_factor))

    def fill_commit(self, state) -> None:
        self.calls.append(("fill", state.step))

    def fill_epoch_commit(self, state) -> None:
        self.calls.append(("fill_epoch", state.epoch))


def _elastic_plan(commit_steps: int = 2) -> ElasticPlan:
    # 384 rows, 32 a batch, 2 ranks: 6 steps an epoch.
    return ElasticPlan(commit_steps, 1, 2, EpochSteps(384, 0, 32, 32, 1, True))


def test_commits_fall_on_multiples_of_the_commit_steps_and_not_on_the_epochs_last_step() -> None:
    hooks, state, progress = _Hooks(), _State(), _Progress()
    events = EpochEvents(hooks, _Plan(_elastic_plan()), progress, 2, Records(), 1, state=state)
    assert events.train_steps == 6
    for done in (4, 5, 6):               # resumed mid-epoch after step 3 (a re-formation at another size)
        events.step_done(0, done, 0.5)
    events.epoch_done(0, {"epoch": 0}, {"loss": 0.5})
    # Step 4, then none at step 6 (the epoch's last): the epoch-end commit holds the validated epoch.
    assert state.commits == [(0, 4, 0), (1, 0, 1)]
    assert hooks.calls == [("fill", 3), ("save", 0, 1, 2), ("fill_epoch", 1)]
    assert progress.steps == [(0, 4), (0, 5), (0, 6)] and progress.epochs == [0]
    assert state.epoch_metrics == [{"epoch": 0, "loss": 0.5}]


def test_a_static_fit_keeps_its_records_and_never_commits() -> None:
    hooks, progress = _Hooks(), _Progress()
    records = Records([{"epoch": 0}], [{"epoch": 0, "loss": 1.0}])     # resumed after epoch 0
    events = EpochEvents(hooks, _Plan(_elastic_plan()), progress, 2, records, 4)
    for done in range(1, 7):
        events.step_done(1, done, None)
    events.epoch_done(1, {"epoch": 1}, {"loss": 0.25})
    assert hooks.calls == [("save", 1, 2, 4)]
    assert events.records.epoch_metrics == [{"epoch": 0, "loss": 1.0}, {"epoch": 1, "loss": 0.25}]


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
