"""KerasEstimator on local[2]: fit, transform, save/load, Pipeline, resume after a failure, bad input."""

from __future__ import annotations

import cloudpickle
import numpy as np
import pytest

keras = pytest.importorskip("keras")

import keras_models  # noqa: E402
from estimator_data import (  # noqa: E402
    assert_fit_fails_before_launch, blobs, features_labels_predictions, predictions, with_ids)
from estimator_models import FailOnce  # noqa: E402  (shipped by value by conftest)
from keras_models import class_accuracy, classifier  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


@pytest.fixture(scope="module", autouse=True)
def ship_test_models_by_value():
    cloudpickle.register_pickle_by_value(keras_models)
    yield
    cloudpickle.unregister_pickle_by_value(keras_models)


def make_estimator(store, **overrides):
    from spark_hvd import KerasEstimator

    settings = dict(num_proc=2, model=classifier(4, 3), optimizer=keras.optimizers.Adam(0.02),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=[class_accuracy],
                    feature_cols=["features"], label_cols=["label"], batch_size=32, epochs=3, store=store,
                    verbose=0)
    settings.update(overrides)
    return KerasEstimator(**settings)


def test_fit_transform_save_load_round_trip(local_spark, store, tmp_path) -> None:
    import os

    from spark_hvd import KerasModel

    logs = tmp_path / "epoch-logs"
    logs.mkdir()
    # A metric object: unpickling it starts TensorFlow's runtime, which must not happen before the rank has
    # set TensorFlow's threads (one share of the cores per rank on the host).
    metrics = [class_accuracy, keras.metrics.SparseCategoricalAccuracy(name="sparse_accuracy")]
    model = make_estimator(store, validation=0.2, metrics=metrics,
                           callbacks=[keras_models.EpochLog(str(logs))]).fit(blobs(local_spark, 600))
    history = model.getHistory()       # Keras's (and Horovod's) dict of lists, one value per epoch
    assert {"loss", "class_accuracy", "sparse_accuracy", "val_loss", "val_class_accuracy"} <= set(history)
    assert all(len(values) == 3 for values in history.values())
    for rank in range(2):
        threads = {entry["intra_op_threads"] for entry in keras_models.read_epoch_logs(str(logs), rank)}
        assert threads == {max(1, (os.cpu_count() or 1) // 2)}, f"rank {rank}"
    assert history["loss"][-1] < history["loss"][0]
    # Where each epoch's time went: apart from Keras's history, whose keys stay Keras's own.
    times = model.getEpochTimes()
    assert [entry["epoch"] for entry in times] == [0, 1, 2]
    assert all(entry["ranks"] == 2 and entry["slowest_rank"] in (0, 1) and
               min(entry["input_s"], entry["compute_s"], entry["communication_s"]) >= 0 for entry in times)
    assert not [key for key in history if key.startswith(("time", "input"))]
    assert history["val_class_accuracy"][-1] > 0.9

    test = with_ids(blobs(local_spark, 200, seed=0, partitions=3))
    out = model.transform(test)
    assert out.columns == test.columns + ["label__output"]
    features, labels, logits = features_labels_predictions(out)
    assert logits.shape == (200, 3)
    assert (logits.argmax(axis=1) == labels).mean() > 0.9
    trained = model.getModel()
    # The column holds exactly what the model computes; the trained model comes back compiled, with its
    # optimizer's state and the custom metric (found through custom_objects).
    np.testing.assert_allclose(logits, trained.predict(features, verbose=0), rtol=1e-5, atol=1e-6)
    assert trained.optimizer is not None and int(trained.optimizer.iterations.numpy()) > 0

    path = str(tmp_path / "saved")
    model.save(path)
    loaded = KerasModel.load(path)
    assert loaded.uid == model.uid
    assert loaded.getHistory() == history
    assert loaded.getFeatureColumns() == ["features"] and loaded.getOutputCols() == ["label__output"]
    np.testing.assert_array_equal(predictions(loaded.transform(test)), logits)
    np.testing.assert_array_equal(loaded.getModel().predict(features, verbose=0),
                                  trained.predict(features, verbose=0))
    with open(f"{path}/data/model.keras", "rb") as f:
        assert f.read(2) == b"PK"     # the native .keras format (a zip), not h5


def test_pipeline_with_vector_assembler_saves_loads_and_transforms(local_spark, store, tmp_path) -> None:
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    raw = blobs(local_spark, 400).withColumn("arr", vector_to_array("features"))
    raw = raw.select(*[F.col("arr")[i].alias(f"x{i}") for i in range(4)], "label")
    assembler = VectorAssembler(inputCols=[f"x{i}" for i in range(4)], outputCol="features")
    estimator = make_estimator(store, epochs=2, output_cols=["scores"], optimizer="adam")
    fitted = Pipeline(stages=[assembler, estimator]).fit(raw)
    path = str(tmp_path / "pipeline")
    fitted.save(path)
    loaded = PipelineModel.load(path)
    test = with_ids(raw)
    scores = predictions(fitted.transform(test), "scores")
    np.testing.assert_array_equal(predictions(loaded.transform(test), "scores"), scores)
    # The ranks trained with Adam's default rate times num_proc ('linear', the default); the model that
    # comes back holds the rate given, as Horovod's does.
    assert float(fitted.stages[-1].getModel().optimizer.learning_rate.numpy()) == pytest.approx(0.001)


def test_a_failed_fit_resumes_from_its_last_checkpoint(local_spark, store, tmp_path) -> None:
    from spark_hvd import RunError
    from spark_hvd.keras.checkpoint import load_checkpoint

    df = blobs(local_spark, 256)
    # 256 rows / (2 ranks * 32) = 4 steps an epoch: the 6th batch on rank 1 is in epoch 2.
    # transformation_fn runs once per row (Horovod's TransformSpec): 5 batches are 160 calls.
    failing = FailOnce(str(tmp_path / "failed-once"), rank=1, after_calls=5 * 32)
    with pytest.raises(RunError, match="injected failure on rank 1") as failure:
        make_estimator(store, run_id="resumable", epochs=3, transformation_fn=failing).fit(df)
    # The failing rank is named even though its TensorFlow process takes seconds to exit.
    assert failure.value.rank == 1 and not failure.value.failure.peer_failure
    checkpoint = load_checkpoint(store, "resumable")
    assert checkpoint is not None and checkpoint.epoch == 0
    assert checkpoint.model[:2] == b"PK"
    first_epoch = checkpoint.history[0]

    model = make_estimator(store, run_id="resumable", epochs=3, transformation_fn=failing).fit(df)
    history = model.getHistory()
    assert all(len(values) == 3 for values in history.values())
    # carried over, not retrained
    assert {key: values[0] for key, values in history.items()} == {k: v for k, v in first_epoch.items()
                                                                  if k != "epoch"}
    final = load_checkpoint(store, "resumable")
    assert final.epoch == 2
    # The optimizer's state came back with the weights: 3 epochs of 4 steps.
    assert int(model.getModel().optimizer.iterations.numpy()) == 12
    assert [p.rsplit("/", 1)[-1] for p in store.list(store.get_checkpoint_path("resumable"))] == \
        ["checkpoint.json", "epoch-0002.keras"]


def test_sample_weights_decide_which_rows_count(local_spark, store) -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, size=400)
    clean = np.arange(400) % 2 == 0
    # Half the rows carry a wrong slope; weight 0 must make them irrelevant (unweighted: about -0.5).
    y = np.where(clean, 2.0 * x, -3.0 * x)
    df = local_spark.createDataFrame(
        [(float(a), float(b), float(c)) for a, b, c in zip(x, y, clean)], "x double, y double, w double")
    model = make_estimator(store, model=keras_models.slope(), optimizer=keras.optimizers.SGD(0.5), loss="mse",
                           metrics=None, feature_cols=["x"], label_cols=["y"], sample_weight_col="w", batch_size=20,
                           epochs=4).fit(df)
    assert model.getModel().layers[-1].kernel.numpy().item() == pytest.approx(2.0, abs=0.05)


BAD_INPUTS = [
    (dict(feature_cols=["nope"]), None, "nope"),
    (dict(feature_cols=["name"]), None, "name"),
    (dict(loss="mse"), None, r"label column\(s\) \['label'\]"),
    (dict(), "empty", "empty"),
    (dict(model="not a model"), None, "keras.Model"),
    (dict(optimizer="no-such-optimizer"), None, "no-such-optimizer"),
]


@pytest.mark.parametrize("overrides, data, message", BAD_INPUTS,
                         ids=["missing", "dtype", "label-shape", "empty", "model", "optimizer"])
def test_bad_input_fails_before_launch(local_spark, store, overrides, data, message) -> None:
    assert_fit_fails_before_launch(local_spark, store, make_estimator, overrides, data, message)
