"""KerasEstimator(elastic=True) on local[2] with real TF/Keras: its params, the checks before launch, the
commit schedule, a fit whose rank is killed mid-epoch resuming from the last commit, and its rank function
under the local elastic launcher going on at one rank (in-process re-form, the learning rate rescaled)."""

from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")

import keras_elastic_victim  # noqa: E402
import keras_models  # noqa: E402
from by_value import pickled_by_value  # noqa: E402
from estimator_data import BAD_ELASTIC_BOUNDS, assert_fit_fails_before_launch, blobs  # noqa: E402
from estimator_elastic_job import run_rank_fn_elastic  # noqa: E402
from keras_models import classifier  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


@pytest.fixture(scope="module", autouse=True)
def ship_test_objects_by_value():
    with pickled_by_value(keras_models, keras_elastic_victim):
        yield


def make_estimator(store, **overrides):
    from spark_hvd import KerasEstimator

    settings = dict(num_proc=2, model=classifier(4, 3), optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), feature_cols=["features"],
                    label_cols=["label"], batch_size=32, epochs=2, store=store, verbose=0, elastic=True)
    settings.update(overrides)
    return KerasEstimator(**settings)


@pytest.mark.parametrize("overrides, message", [
    *BAD_ELASTIC_BOUNDS,
    ({"elastic": False, "max_num_proc": 3}, r"max_num_proc given without elastic=True"),
])
def test_bad_elastic_bounds_fail_before_launch(local_spark, store, overrides, message) -> None:
    assert_fit_fails_before_launch(local_spark, store, make_estimator, overrides, None, message)


def test_elastic_params_save_and_load(tmp_path) -> None:
    from spark_hvd import KerasEstimator

    path = str(tmp_path / "estimator")
    make_estimator(None, min_num_proc=1, max_num_proc=3, elastic_commit_steps=7).save(path)
    loaded = KerasEstimator.load(path)
    assert (loaded.getElastic(), loaded.getMinNumProc(), loaded.getMaxNumProc(), loaded.getElasticCommitSteps()) \
        == (True, 1, 3, 7)
    assert KerasEstimator().getElastic() is False


def test_a_resumed_epochs_metrics_carry_the_committed_steps_sums() -> None:
    from types import SimpleNamespace

    from spark_hvd.keras.rank.carried_metrics import CarriedMetrics

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(128, 4)).astype("float32"), rng.integers(0, 3, 128)

    def compiled():
        model = classifier(4, 3, seed=1)
        model.compile(optimizer=keras.optimizers.SGD(0.1), metrics=["accuracy"],
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    whole = compiled().fit(x, y, batch_size=32, shuffle=False, verbose=0).history
    # The same epoch in two fits: 2 steps, a commit (save), then the 2 steps left, as after a re-formation.
    model, state = compiled(), SimpleNamespace(step=0, metric_sums=None)
    carried = CarriedMetrics(state, average=lambda values: values)   # one rank: its own sums
    model.fit(x[:64], y[:64], batch_size=32, shuffle=False, verbose=0, callbacks=[carried])
    carried.save()
    state.step = 2
    resumed = model.fit(x[64:], y[64:], batch_size=32, shuffle=False, verbose=0, callbacks=[carried]).history
    assert resumed["loss"][0] == pytest.approx(whole["loss"][0], rel=1e-5)
    assert resumed["accuracy"][0] == pytest.approx(whole["accuracy"][0], rel=1e-6)
    assert state.metric_sums is None   # the epoch's end: the next epoch starts from none


def _fit_losing_rank_1(spark, store, tmp_path, kill_at_call: int, name: str):
    victim = keras_elastic_victim.KillAtBatch(victim_rank=1, kill_at_call=kill_at_call,
                                              marker=str(tmp_path / f"{name}.killed"))
    estimator = make_estimator(store, min_num_proc=1, elastic_commit_steps=2, random_seed=5, run_id=name,
                               validation=0.25, callbacks=[victim])
    model = estimator.fit(blobs(spark, 512))
    assert (tmp_path / f"{name}.killed").exists(), "the victim never died"
    return model


def test_fit_with_a_rank_killed_mid_epoch_resumes_from_the_commit(local_spark, store, tmp_path) -> None:
    # About 384 training rows: 6 steps an epoch on 2 ranks, commits after steps 2 and 4. Rank 1 dies at the
    # start of step 4 ("late": step 3 was applied but not committed) or of step 3 ("early": right after the
    # commit); local[2] frees the lost task's slot, so the relaunched stage has 2 ranks again.
    late = _fit_losing_rank_1(local_spark, store, tmp_path, kill_at_call=4, name="late")
    early = _fit_losing_rank_1(local_spark, store, tmp_path, kill_at_call=3, name="early")
    assert late.getReformations() == [{"epoch": 0, "step": 2, "size": 2, "previous_size": 2}]
    assert early.getReformations() == late.getReformations()
    # The rolled-back step 3 leaves no trace: the model equals the one restarted from the same commit.
    for mine, theirs in zip(late.getModel().get_weights(), early.getModel().get_weights()):
        np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-7)
    # Horovod's history: one value per epoch and metric, no epoch twice after the resume.
    history = late.getHistory()
    assert sorted(history) == ["loss", "val_loss"] and all(len(v) == 2 for v in history.values())
    np.testing.assert_allclose(history["val_loss"], early.getHistory()["val_loss"], rtol=1e-6)
    # The returned optimizer holds the learning rate as given (unscaled from the last formation's size).
    rate = late.getModel().optimizer.learning_rate
    assert float(keras.ops.convert_to_numpy(rate)) == pytest.approx(0.05)
    # The re-formations are saved with the model.
    from spark_hvd.keras import KerasModel

    late.save(str(tmp_path / "late-model"))
    assert KerasModel.load(str(tmp_path / "late-model")).getReformations() == late.getReformations()


def test_killed_rank_under_the_local_launcher_goes_on_at_one_rank(local_spark, store, tmp_path) -> None:
    from spark_hvd.common.util import DEFAULT_SPLIT_SEED
    from spark_hvd.data import check_schema, materialize_checked
    from spark_hvd.estimator.sample import read_sample
    from spark_hvd.keras.saving import model_from_bytes

    df = blobs(local_spark, 512)
    victim = keras_elastic_victim.KillAtBatch(victim_rank=1, kill_at_call=5, marker=str(tmp_path / "killed"))
    logs = tmp_path / "epoch-logs"
    logs.mkdir()
    estimator = make_estimator(store, min_num_proc=1, elastic_commit_steps=3, random_seed=5,
                               callbacks=[victim, keras_models.EpochLog(str(logs))])
    data = materialize_checked(df, store, check_schema(df, ["features"], ["label"], None, None),
                               DEFAULT_SPLIT_SEED, 2)
    estimator._check_sample(read_sample(data, rows=2))   # as fit does before _rank_fn
    plan = estimator._plan(data, 2)
    assert (plan.train_steps, plan.elastic.commit_steps) == (8, 3)
    # keras_models and the victim go by value already (this module's fixture).
    result = run_rank_fn_elastic(tmp_path, estimator._rank_fn(plan), "one-rank", by_value=[])
    # Rank 1 died at the start of step 5 (step 4 uncommitted): the commit after step 3 of 8 resumes on the
    # survivor, in the same process, at the same fraction of the epoch: step 6 of 16.
    assert result["reformations"] == [{"epoch": 0, "step": 6, "size": 1, "previous_size": 2}]
    assert [entry["epoch"] for entry in result["history"]] == [0, 1]
    # The rate in effect follows the size (0.1 on 2 ranks, 0.05 on one: every epoch ended on one rank); the
    # returned model holds it as given.
    assert [(e["epoch"], e["lr"]) for e in keras_models.read_epoch_logs(str(logs), 0)] == \
        [(0, pytest.approx(0.05)), (1, pytest.approx(0.05))]
    rate = model_from_bytes(result["model"]).optimizer.learning_rate
    assert float(keras.ops.convert_to_numpy(rate)) == pytest.approx(0.05)
