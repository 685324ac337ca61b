"""TorchEstimator(elastic=True): its params, the checks before launch, and its training function on real
processes under the local elastic launcher, with a rank killed mid-epoch."""

from __future__ import annotations

import io
from pathlib import Path

import cloudpickle
import pytest
import torch

import elastic_victim
from estimator_data import BAD_ELASTIC_BOUNDS, assert_fit_fails_before_launch, blobs
from estimator_elastic_job import run_rank_fn_elastic
from estimator_models import class_loss, classifier

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def make_estimator(store, **overrides):
    from spark_hvd import TorchEstimator

    model = overrides.pop("model", None) or classifier(4, 3)
    settings = dict(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                    loss=class_loss, feature_cols=["features"], label_cols=["label"], batch_size=32, epochs=2,
                    store=store, verbose=0, elastic=True)
    settings.update(overrides)
    return TorchEstimator(**settings)


@pytest.mark.parametrize("overrides, message", [
    *BAD_ELASTIC_BOUNDS,
    ({"elastic": False, "min_num_proc": 1}, r"min_num_proc given without elastic=True"),
])
def test_bad_elastic_bounds_fail_before_launch(local_spark, store, overrides, message) -> None:
    assert_fit_fails_before_launch(local_spark, store, make_estimator, overrides, None, message)
    from spark_hvd.errors import InputError

    assert issubclass(InputError, ValueError)


def test_elastic_on_a_non_spark_backend_fails_before_launch(local_spark, store) -> None:
    from spark_hvd.common.backend import Backend

    class OneRank(Backend):
        def num_processes(self) -> int:
            return 1

        def run(self, fn, args=(), kwargs=None, env=None, **options):
            raise AssertionError("launched")

    assert_fit_fails_before_launch(local_spark, store, make_estimator, {"num_proc": None, "backend": OneRank()},
                                   None, r"elastic=True runs on Spark's executors.*got OneRank")


def test_elastic_params_save_load_and_explain(store, tmp_path) -> None:
    from spark_hvd import TorchEstimator

    estimator = make_estimator(None, min_num_proc=1, max_num_proc=3, elastic_commit_steps=7)
    text = estimator.explainParams()
    for name in ("elastic", "min_num_proc", "max_num_proc", "elastic_commit_steps"):
        assert f"{name}:" in text
    path = str(tmp_path / "estimator")
    estimator.save(path)
    loaded = TorchEstimator.load(path)
    assert (loaded.getElastic(), loaded.getMinNumProc(), loaded.getMaxNumProc(), loaded.getElasticCommitSteps()) \
        == (True, 1, 3, 7)
    # elastic=False by default: nothing of it reaches the plan.
    assert TorchEstimator().getElastic() is False


def _elastic_rank_fn(spark, store, kill_at_call: int, bpps: int = 1):
    """The rank function of a 2-rank elastic fit (512 rows: 8 steps an epoch on 2 ranks, 16 on one), and its
    plan, built as fit builds them, on a float64 model whose rank 1 dies at its ``kill_at_call``-th step."""
    from spark_hvd.common.util import DEFAULT_SPLIT_SEED
    from spark_hvd.data import check_schema, materialize_checked

    df = blobs(spark, 512)
    model = elastic_victim.KilledAtStep(4, 3, victim_rank=1, kill_at_call=kill_at_call)
    estimator = make_estimator(store, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               min_num_proc=1, elastic_commit_steps=3, backward_passes_per_step=bpps,
                               shuffle=True, random_seed=5)
    schema = check_schema(df, ["features"], ["label"], None, None)
    data = materialize_checked(df, store, schema, DEFAULT_SPLIT_SEED, 2)
    plan = estimator._plan(data, 2)
    return estimator._rank_fn(plan), plan


def _run_elastic_job(tmp_path: Path, fn, name: str) -> dict:
    return run_rank_fn_elastic(tmp_path, fn, name, by_value=[elastic_victim])


def _weights(result: dict) -> dict[str, torch.Tensor]:
    return torch.load(io.BytesIO(result["state_dict"]), weights_only=True)


def test_killed_rank_mid_epoch_resumes_from_the_commit_on_one_rank(local_spark, store, tmp_path) -> None:
    # Commits at steps 3 and 6 of 8; rank 1 dies in its 5th step, after rank 0 applied the 4th (uncommitted).
    fn, plan = _elastic_rank_fn(local_spark, store, kill_at_call=5)
    assert (plan.train_steps, plan.elastic.commit_steps) == (8, 3)
    late = _run_elastic_job(tmp_path, fn, "late")
    # The same commit, the loss found at the first step after it: nothing to undo but the step itself.
    fn, _ = _elastic_rank_fn(local_spark, store, kill_at_call=4)
    early = _run_elastic_job(tmp_path, fn, "early")

    # Resumed on 1 rank at epoch 0, step 3 of 8 -> step 6 of 16 (the same fraction of the epoch).
    assert late["reformations"] == [{"epoch": 0, "step": 6, "size": 1, "previous_size": 2}]
    assert early["reformations"] == late["reformations"]
    # The rolled-back step 4 leaves no trace: the model equals the one restarted from the same commit.
    for name, tensor in _weights(late).items():
        assert tensor.dtype == torch.float64
        torch.testing.assert_close(tensor, _weights(early)[name], rtol=0, atol=0)
    assert late["epoch_metrics"] == early["epoch_metrics"]
    # The history keeps Horovod's format: one entry per epoch, nothing else.
    assert [sorted(h) for h in late["history"]] == [["epoch", "train"]] * 2
    # The optimizer comes back with the learning rate as given (unscaled from the last formation's size).
    assert torch.load(io.BytesIO(late["optimizer_state"]), weights_only=True)["param_groups"][0]["lr"] \
        == pytest.approx(0.05)


class _FakeState:
    """The attributes enter_formation reads and writes, and the save it calls."""

    def __init__(self, **attrs) -> None:
        self.__dict__.update(attrs)
        self.saves = 0

    def save(self) -> None:
        self.saves += 1


def enter_formation(state, size: int, elastic, optimizer, linear: bool) -> None:
    """The recipe's enter_formation, rescaling a torch optimizer as the torch hooks do."""
    from spark_hvd.recipe.formation import enter_formation as shared_enter_formation
    from spark_hvd.torch.trainer import scale_learning_rate

    shared_enter_formation(state, size, elastic, lambda factor: scale_learning_rate(optimizer, factor), linear)


def _elastic_plan(bpps: int = 1, commit_steps: int = 3):
    from spark_hvd.recipe.plan import ElasticPlan, EpochSteps

    return ElasticPlan(commit_steps, 1, 2, EpochSteps(512, 0, 32, 32, bpps, True))


def _position_after(steps: int, size: int = 2, epoch: int = 1) -> list[int]:
    """The data position of epoch 1 of 512 rows after ``steps`` steps of ``size`` ranks of 32 rows (8 steps)."""
    from spark_hvd.data.read.epoch_position import EpochPosition

    return EpochPosition.fresh(epoch, 512).deal(size, 512 // (32 * size), 32).after(steps).to_ints()


@pytest.mark.parametrize("linear, lr_after", [(True, 0.05), (False, 0.1)])
def test_reformation_rescales_the_learning_rate_and_resumes_where_the_rows_left_take_the_steps_left(
        linear, lr_after) -> None:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)   # 0.05 scaled for 2 ranks, under 'linear'
    # 3 of 8 steps on 2 ranks: 320 of 512 rows left, 10 steps on one rank (of 16).
    state = _FakeState(formations=1, epoch=1, step=3, steps=8, size=2, lr_size=2 if linear else 1, reformations=[],
                       position=_position_after(3), rng=None)
    enter_formation(state, 1, _elastic_plan(), optimizer, linear)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(lr_after)
    assert (state.step, state.steps, state.size, state.formations, state.saves) == (6, 16, 1, 2, 1)
    assert state.reformations == [{"epoch": 1, "step": 6, "size": 1, "previous_size": 2}]
    # Growing back to 2 ranks: the rate follows the size again, and the 320 rows take 5 of 8 steps.
    enter_formation(state, 2, _elastic_plan(), optimizer, linear)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1)
    assert (state.step, state.steps) == (3, 8)
    assert [r["size"] for r in state.reformations] == [1, 2]


def test_first_formation_records_nothing_and_keeps_the_rate() -> None:
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.2)
    state = _FakeState(formations=0, epoch=0, step=0, steps=8, size=2, lr_size=2, reformations=[], position=None,
                       rng=None)
    enter_formation(state, 2, _elastic_plan(), optimizer, True)
    assert (state.reformations, state.formations, optimizer.param_groups[0]["lr"]) == ([], 1, 0.2)


def test_resumed_step_leaves_whole_accumulation_windows() -> None:
    steps = _elastic_plan(bpps=2).steps
    assert steps.at(2) == (8, 0) and steps.at(3) == (6, 0)
    # 4 of 8 steps on 2 ranks left 256 rows: 3 steps of 3 ranks, rounded up to a window of 2, of the 6.
    assert steps.resumed_step(4, 256, 3) == 2
    assert steps.resumed_step(0, 512, 3) == 0


def test_commit_steps_round_up_to_whole_accumulation_windows() -> None:
    from spark_hvd.estimator.elastic_plan import EpochSteps

    estimator = make_estimator(None, elastic_commit_steps=3, backward_passes_per_step=2)
    assert estimator._elastic_plan(2, EpochSteps(512, 0, 32, 32, 2, True)).commit_steps == 4
    assert make_estimator(None, elastic=False)._elastic_plan(2, EpochSteps(512, 0, 32, 32, 1, True)) is None


@pytest.fixture
def ship_victim():
    cloudpickle.register_pickle_by_value(elastic_victim)
    yield
    cloudpickle.unregister_pickle_by_value(elastic_victim)


def _fit_losing_rank_1(spark, store, tmp_path, kill_at_call: int, name: str):
    model = elastic_victim.KilledAtStep(4, 3, victim_rank=1, kill_at_call=kill_at_call,
                                        marker=str(tmp_path / f"{name}.killed"))
    estimator = make_estimator(store, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               min_num_proc=1, elastic_commit_steps=3, random_seed=5, run_id=name)
    return estimator.fit(blobs(spark, 512))


def test_fit_with_a_rank_killed_mid_epoch_resumes_from_the_commit(local_spark, store, tmp_path, ship_victim) -> None:
    # local[2]: the lost task's slot is free again, so the relaunched stage has 2 ranks too.
    late = _fit_losing_rank_1(local_spark, store, tmp_path, kill_at_call=5, name="late")
    early = _fit_losing_rank_1(local_spark, store, tmp_path, kill_at_call=4, name="early")
    assert late.getReformations() == [{"epoch": 0, "step": 3, "size": 2, "previous_size": 2}]
    assert early.getReformations() == late.getReformations()
    for (name, tensor), other in zip(late.getModel().state_dict().items(), early.getModel().state_dict().values()):
        assert tensor.dtype == torch.float64, name
        torch.testing.assert_close(tensor, other, rtol=0, atol=0)
    assert [sorted(h) for h in late.getHistory()] == [["epoch", "train"]] * 2
    assert late.getEpochMetrics() == early.getEpochMetrics()


def test_progress_keeps_the_first_start_across_relaunched_stages() -> None:
    from spark_hvd.estimator.progress import EVENT_START, FitProgress

    progress = FitProgress(epochs=2, steps_per_epoch=8, enabled=False)
    progress.on_event(0, {"type": EVENT_START, "first_epoch": 0})
    began = progress.started_at
    progress.on_event(0, {"type": EVENT_START, "first_epoch": 1})
    assert progress.started_at == began   # the fit's train time counts from the first stage

