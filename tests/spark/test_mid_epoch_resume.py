"""checkpoint_every_steps: a fit killed inside an epoch and fitted again with its run_id goes on from the last
checkpoint's step and ends with the very weights of a fit that was never interrupted, with a shuffled, seeded
data order, dropout, momentum: torch, Keras and Lightning."""

from __future__ import annotations

import cloudpickle
import numpy as np
import pytest
import torch

import row_recording
from estimator_data import blobs, with_ids
from estimator_models import class_loss

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ROWS, BATCH = 576, 16      # 18 steps an epoch on 2 ranks


@pytest.fixture(scope="module")
def frame(local_spark):
    return with_ids(blobs(local_spark, ROWS))


@pytest.fixture
def by_value():
    import keras_elastic_victim
    import lightning_models

    modules = (row_recording, keras_elastic_victim, lightning_models)
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    yield
    for module in modules:
        cloudpickle.unregister_pickle_by_value(module)


def _fit_twice(make, store, df, tmp_path):
    """(the model of an uninterrupted fit, that of a fit whose rank 1 failed in epoch 1's 7th step, fitted
    again with its run_id): ``make(run_id, record_dir, fail)`` makes the estimator."""
    from spark_hvd import RunError

    dirs = {name: tmp_path / name for name in ("whole", "killed", "resumed")}
    for path in dirs.values():
        path.mkdir()
    whole = make("whole", str(dirs["whole"]), None).fit(df)
    with pytest.raises(RunError, match="rank 1"):
        make("killed", str(dirs["killed"]), (1, 18 + 7, 2)).fit(df)
    resumed = make("killed", str(dirs["resumed"]), None).fit(df)
    # The resumed fit trained only what the checkpoint after epoch 1's step 4 had left: 14 steps.
    assert [len(steps) for steps in row_recording.steps_by_process(dirs["resumed"])] == [14, 14]
    return whole, resumed


def test_torch_fit_killed_mid_epoch_ends_as_an_uninterrupted_one(frame, store, tmp_path, by_value) -> None:
    from spark_hvd import TorchEstimator

    def make(run_id, record_dir, fail):
        model = row_recording.RecordingNet(4, 3, record_dir, fail=fail)
        return TorchEstimator(num_proc=2, model=model, loss=class_loss,
                              optimizer=torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9),
                              feature_cols=["features", "id"], label_cols=["label"], batch_size=BATCH, epochs=2,
                              store=store, verbose=0, shuffle=True, random_seed=11, run_id=run_id,
                              checkpoint_every_steps=4)

    whole, resumed = _fit_twice(make, store, frame, tmp_path)
    for (name, mine), theirs in zip(whole.getModel().state_dict().items(), resumed.getModel().state_dict().values()):
        assert torch.equal(mine, theirs), name
    assert resumed.getEpochMetrics() == whole.getEpochMetrics()
    assert resumed.getHistory() == whole.getHistory()


def test_lightning_fit_killed_mid_epoch_ends_as_an_uninterrupted_one(frame, store, tmp_path, by_value) -> None:
    import lightning_models
    from spark_hvd.lightning import TorchEstimator

    def make(run_id, record_dir, fail):
        module = lightning_models.RecordingModule(record_dir, fail)
        return TorchEstimator(num_proc=2, model=module, feature_cols=["features", "id"], label_cols=["label"],
                              batch_size=BATCH, epochs=2, store=store, verbose=0, shuffle=True, random_seed=11,
                              run_id=run_id, checkpoint_every_steps=4)

    whole, resumed = _fit_twice(make, store, frame, tmp_path)
    for (name, mine), theirs in zip(whole.getModel().state_dict().items(), resumed.getModel().state_dict().values()):
        assert torch.equal(mine, theirs), name


def test_keras_fit_killed_mid_epoch_ends_as_an_uninterrupted_one(frame, store, tmp_path, by_value) -> None:
    import keras

    import keras_elastic_victim
    from spark_hvd.keras import KerasEstimator

    def make(run_id, fail_at=None):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="tanh"),
                                  keras.layers.Dropout(0.2), keras.layers.Dense(3)])
        # The victim dies at the start of its step ``fail_at`` (SIGKILL, as a lost executor).
        callbacks = [keras_elastic_victim.KillAtBatch(1, fail_at, str(tmp_path / "keras.killed"))] if fail_at else []
        return KerasEstimator(num_proc=2, model=model, optimizer=keras.optimizers.SGD(0.02, momentum=0.9),
                              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                              feature_cols=["features"], label_cols=["label"], batch_size=BATCH, epochs=2,
                              store=store, verbose=0, shuffle=True, random_seed=11, run_id=run_id,
                              checkpoint_every_steps=4, callbacks=callbacks)

    from spark_hvd import RunError

    whole = make("whole").fit(frame)
    with pytest.raises(RunError, match="rank 1"):
        make("killed", fail_at=18 + 7).fit(frame)          # epoch 1's 7th step: the checkpoint at 4 holds
    resumed = make("killed").fit(frame)
    for mine, theirs in zip(whole.getModel().get_weights(), resumed.getModel().get_weights()):
        assert np.array_equal(mine, theirs)
    # The resumed epoch's loss adds the checkpoint's sums (averaged over the ranks, in float32) to the ones
    # Keras keeps after it: equal up to that rounding.
    assert sorted(resumed.getHistory()) == ["loss"]
    np.testing.assert_allclose(resumed.getHistory()["loss"], whole.getHistory()["loss"], rtol=1e-6)
