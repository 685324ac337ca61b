"""Keras's TensorBoard callback in a KerasEstimator fit on local[2], as Horovod's keras_spark_mnist.py passes
it (``keras.callbacks.TensorBoard(profile_batch=5)``): rank 0 writes its logs, with the profile of batch 5,
to a local directory that is synced under the run's logs in the Store, as Horovod's remote trainer does.
TensorFlow 2.21 no longer installs the tensorboard package, which the callback needs: the ``[tensorflow]``
extra and requirements-dev.txt name it."""

from __future__ import annotations

import posixpath

import cloudpickle
import numpy as np
import pytest

keras = pytest.importorskip("keras")

import keras_models  # noqa: E402
from estimator_data import blobs  # noqa: E402
from keras_models import class_accuracy, classifier  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


@pytest.fixture(scope="module", autouse=True)
def ship_test_models_by_value():
    cloudpickle.register_pickle_by_value(keras_models)
    yield
    cloudpickle.unregister_pickle_by_value(keras_models)


def scalars(store, path: str, tmp_path) -> dict[str, dict[int, float]]:
    """tag -> {step: value} of the per-epoch scalars (``epoch_*``) in one TensorBoard event file in the Store."""
    import tensorflow as tf

    local = tmp_path / posixpath.basename(path)
    local.write_bytes(store.read_bytes(path))
    values: dict[str, dict[int, float]] = {}
    for event in tf.compat.v1.train.summary_iterator(str(local)):
        for value in event.summary.value:
            if value.tag.startswith("epoch_"):
                values.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
    return values


def test_tensorboard_callback_with_profiling_writes_rank_0s_logs_under_the_run(local_spark, store,
                                                                                tmp_path) -> None:
    from spark_hvd import KerasEstimator

    users_dir = tmp_path / "users-log-dir"
    board = keras.callbacks.TensorBoard(log_dir=str(users_dir), profile_batch=5)
    # 640 rows, every 5th for validation: 512 to train, ceil(512 / (32 * 2 ranks)) = 8 steps an epoch, so
    # batch 5 is profiled.
    estimator = KerasEstimator(num_proc=2, model=classifier(4, 3), optimizer=keras.optimizers.Adam(0.02),
                               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                               metrics=[class_accuracy], feature_cols=["features"], label_cols=["label"],
                               batch_size=32, epochs=2, validation="is_val", callbacks=[board], store=store,
                               run_id="board", verbose=0)
    history = estimator.fit(blobs(local_spark, 640)).getHistory()

    logs = store.get_logs_path("board")
    assert logs.startswith(store.get_run_path("board"))
    fs = store.filesystem()
    root = store.to_fs_path(logs).rstrip("/")
    files = sorted(posixpath.relpath(f, root) for f in fs.find(root))
    train = [f for f in files if f.startswith("train/events.out.tfevents.")]
    validation = [f for f in files if f.startswith("validation/events.out.tfevents.")]
    profiles = [f for f in files if f.startswith("train/plugins/profile/") and f.endswith(".xplane.pb")]
    # One writer each: rank 1 ran without the callback (it would write the same files).
    assert len(train) == 1 and len(validation) == 1, files
    assert profiles, files
    # The callback saw the metrics averaged over the ranks, as the history has them, every epoch.
    written = scalars(store, f"{logs}/{train[0]}", tmp_path)
    assert written["epoch_loss"] == pytest.approx(dict(enumerate(history["loss"])), rel=1e-5)
    assert written["epoch_class_accuracy"] == pytest.approx(dict(enumerate(history["class_accuracy"])), rel=1e-5)
    written = scalars(store, f"{logs}/{validation[0]}", tmp_path)
    assert written["epoch_loss"] == pytest.approx(dict(enumerate(history["val_loss"])), rel=1e-5)
    assert np.isfinite(history["loss"]).all()
    # The run decides where the logs go, as in Horovod: the directory the user named stays empty.
    assert not users_dir.exists()


def test_rank_0_without_tensorboard_says_what_to_install(monkeypatch) -> None:
    """Where the executors' Python lacks tensorboard, rank 0 fails before training, saying what to install
    (not with TBNotInstalledError at the first epoch's end)."""
    import importlib.util
    from types import SimpleNamespace

    from spark_hvd.keras.rank import rank_callbacks as module

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "tensorboard" else find_spec(name, *args))
    hvd = SimpleNamespace(MetricAverageCallback=lambda: None, BroadcastGlobalVariablesCallback=lambda root: None)
    board = keras.callbacks.TensorBoard()
    recorder = keras.callbacks.Callback()
    with pytest.raises(ModuleNotFoundError, match=r"pip install tensorboard .*spark-hvd\[tensorflow\]"):
        module.rank_callbacks(hvd, 0, [board], None, [recorder], "logs", store=None, run_id="r")
    # The other ranks leave the callback out, so they need nothing.
    assert board not in module.rank_callbacks(hvd, 1, [board], None, [recorder], "logs", store=None, run_id="r")
