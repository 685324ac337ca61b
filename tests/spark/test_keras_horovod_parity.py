"""KerasEstimator and KerasModel as Horovod 0.28's horovod.spark.keras has them, on local[2]: its constructor
arguments, callbacks, checkpoint_callback and BestModelCheckpoint, history, learning-rate rule, reshapes,
KerasModel(...) without a fit, an unfitted Pipeline's persistence, and the two porting bugs (several
feature columns; binary crossentropy on a scalar label)."""

from __future__ import annotations

import inspect

import cloudpickle
import numpy as np
import pytest

keras = pytest.importorskip("keras")

import keras_models  # noqa: E402
from estimator_data import blobs, features_labels_predictions, predictions, with_ids  # noqa: E402
from estimator_models import FailOnce  # noqa: E402  (shipped by value by conftest)
from keras_models import EpochLog, class_accuracy, classifier, read_epoch_logs  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


@pytest.fixture(scope="module", autouse=True)
def ship_test_models_by_value():
    cloudpickle.register_pickle_by_value(keras_models)
    yield
    cloudpickle.unregister_pickle_by_value(keras_models)


def make_estimator(store, **overrides):
    from spark_hvd.keras import KerasEstimator

    settings = dict(num_proc=2, model=classifier(4, 3), optimizer=keras.optimizers.Adam(0.02),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=[class_accuracy],
                    feature_cols=["features"], label_cols=["label"], batch_size=32, epochs=3, store=store,
                    verbose=0)
    settings.update(overrides)
    return KerasEstimator(**settings)


def accuracy(out, column="label__output"):
    _, labels, scores = features_labels_predictions(out, column)
    return float((scores.argmax(axis=1) == labels).mean())


# --- the porting bugs ---------------------------------------------------------------------------

def test_two_feature_columns_train_and_transform(local_spark, store) -> None:
    """Several feature columns reach model.fit as a tuple (tf.data refused the list they were)."""
    from pyspark.ml.functions import array_to_vector, vector_to_array
    from pyspark.sql import functions as F

    df = blobs(local_spark, 300).withColumn("values", vector_to_array("features"))
    df = df.withColumn("first", array_to_vector(F.slice("values", 1, 3))).withColumn("second", F.col("values")[3])
    model = make_estimator(store, model=keras_models.two_inputs(), feature_cols=["first", "second"],
                           tensorflow_dataset_prefetch_buffer_size=1).fit(df)
    assert model.getHistory()["class_accuracy"][-1] > 0.9
    assert accuracy(model.transform(with_ids(df))) > 0.9
    # Horovod's Keras epochs round up: ceil(300 rows / (32 * 2 ranks)) = 5 steps, 3 epochs.
    assert int(model.getModel().optimizer.iterations.numpy()) == 15


def test_binary_crossentropy_takes_a_scalar_label_for_a_sigmoid_output(local_spark, store) -> None:
    """Keras's compiled loss fits a (B,) 0/1 label to a (B, 1) output, so the sample check must too."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    df = blobs(local_spark, 300).withColumn("label", (F.col("label") == 0).cast("long"))
    model = make_estimator(store, model=keras_models.binary(4), loss="binary_crossentropy",
                           metrics=["accuracy"]).fit(df)
    assert model.getHistory()["accuracy"][-1] > 0.9
    out = model.transform(with_ids(df))
    # A scalar label gives a scalar prediction of the label's type: the rounded probability, as Horovod.
    assert out.schema["label__output"].dataType == LongType()
    rows = out.select("label", "label__output").collect()
    assert {r.label__output for r in rows} <= {0, 1}
    assert np.mean([r.label == r.label__output for r in rows]) > 0.9


# --- constructor arguments ----------------------------------------------------------------------

def horovod_arguments(tmp_path):
    """A valid value for every argument of Horovod 0.28's KerasEstimator."""
    from collective.keras import Compression
    from collective.keras.callbacks import BestModelCheckpoint
    from spark_hvd import Store
    from spark_hvd.common.backend import SparkBackend

    return dict(
        num_proc=2, model=classifier(4, 3), backend=SparkBackend(num_proc=2), store=Store.create(str(tmp_path)),
        custom_objects={"class_accuracy": class_accuracy}, optimizer=keras.optimizers.Adam(0.01), loss="mse",
        loss_weights=[1.0], sample_weight_col="w", gradient_compression=Compression.fp16, metrics=["mae"],
        feature_cols=["f"], label_cols=["l"], validation=0.1, callbacks=[keras.callbacks.EarlyStopping()],
        batch_size=8, val_batch_size=4, epochs=2, verbose=0, random_seed=1, shuffle_buffer_size=100,
        shuffle=False, partitions_per_process=5, run_id="r", train_steps_per_epoch=3, validation_steps_per_epoch=2,
        transformation_fn=lambda row: row, train_reader_num_workers=3, val_reader_num_workers=3,
        reader_pool_type="process", label_shapes=[[-1, 1]], checkpoint_callback=BestModelCheckpoint(),
        inmemory_cache_all=True, backend_env={"A": "1"}, use_gpu=False, mp_start_method="spawn")


def test_every_horovod_argument_is_a_param(tmp_path) -> None:
    from spark_hvd.keras import KerasEstimator
    from spark_hvd.keras.params import HOROVOD_KERAS_ARGUMENTS

    values = horovod_arguments(tmp_path)
    assert set(values) == set(HOROVOD_KERAS_ARGUMENTS)
    assert set(HOROVOD_KERAS_ARGUMENTS) <= set(inspect.signature(KerasEstimator.__init__).parameters)
    estimator = KerasEstimator(**values)
    for name, value in values.items():
        stored = estimator.getOrDefault(estimator.getParam(name))
        assert stored is value or stored == value, name
    assert estimator.getCheckpointCallback() is values["checkpoint_callback"]
    # Horovod's defaults where nothing was given.
    fresh = KerasEstimator()
    assert fresh.getCustomObjects() == {} and fresh.getCheckpointCallback() is None
    assert fresh.getCallbacks() == [] and fresh.getMetrics() == [] and fresh.getRandomSeed() is None
    assert fresh.getBatchSize() == 32 and fresh.getEpochs() == 1 and fresh.getLearningRateScaling() == "linear"


@pytest.mark.parametrize("keyword, message", [
    ("bogus_option", "'bogus_option'"),
    ("batch_sise", "did you mean 'batch_size'"),
    ("feature_columns", "feature_cols"),
    ("loss_constructors", "TorchEstimator"),
    ("input_shapes", "model.inputs"),
])
def test_an_unknown_keyword_is_named_with_its_replacement(keyword, message) -> None:
    from spark_hvd.estimator.unknown_params import UnknownParamError
    from spark_hvd.keras import KerasEstimator

    with pytest.raises(UnknownParamError, match=message) as raised:
        KerasEstimator(epochs=1, **{keyword: 1})
    assert isinstance(raised.value, TypeError)
    with pytest.raises(UnknownParamError, match=message):
        KerasEstimator().setParams(**{keyword: 1})


# --- callbacks, learning rate, checkpoint_callback ---------------------------------------------

def test_user_callbacks_run_on_every_rank_after_the_metric_average(local_spark, store, tmp_path) -> None:
    from collective.keras.callbacks import LearningRateScheduleCallback
    from spark_hvd.keras.checkpoint import load_checkpoint
    from spark_hvd.keras.saving import model_from_bytes

    epochs_dir = tmp_path / "epochs"
    epochs_dir.mkdir()
    # Horovod starts every schedule from the rate the ranks train with, whatever initial_lr says.
    schedule = LearningRateScheduleCallback(initial_lr=123.0, multiplier=0.5, start_epoch=1)
    callbacks = [schedule, EpochLog(str(epochs_dir))]
    model = make_estimator(store, epochs=2, optimizer=keras.optimizers.SGD(0.01), validation="is_val",
                           callbacks=callbacks, run_id="callbacks").fit(blobs(local_spark, 256))
    history = model.getHistory()
    for rank in (0, 1):
        entries = read_epoch_logs(str(epochs_dir), rank)
        assert [e["epoch"] for e in entries] == [0, 1]
        # The logs every rank's callback saw were already averaged: they are the history's.
        for e in entries:
            for key in ("loss", "val_loss", "class_accuracy"):
                assert e["logs"][key] == pytest.approx(history[key][e["epoch"]], rel=1e-6)
        # Linear scaling: 0.01 * 2 ranks; then the schedule halves that from epoch 1.
        assert [e["lr"] for e in entries] == pytest.approx([0.02, 0.01])
    # What leaves the ranks holds the rate divided again, as Horovod's returned model does.
    assert float(model.getModel().optimizer.learning_rate.numpy()) == pytest.approx(0.005)
    checkpoint = load_checkpoint(store, "callbacks")
    saved = model_from_bytes(checkpoint.model, {"class_accuracy": class_accuracy})
    assert float(saved.optimizer.learning_rate.numpy()) == pytest.approx(0.005)


def test_rank_0s_tensorboard_writes_to_the_runs_logs(local_spark, store) -> None:
    pytest.importorskip("tensorboard", reason="Keras's TensorBoard callback needs the tensorboard package")
    board = keras.callbacks.TensorBoard(log_dir="not-used", write_graph=False)
    make_estimator(store, epochs=1, callbacks=[board], run_id="board").fit(blobs(local_spark, 128))
    assert store.list(store.get_logs_path("board"))


@pytest.mark.parametrize("weights_only", [False, True], ids=["model", "weights"])
def test_best_model_checkpoint_gives_the_best_epochs_model(local_spark, store, weights_only) -> None:
    from collective.keras.callbacks import BestModelCheckpoint

    df = blobs(local_spark, 256)
    # mode='max' makes the first epoch's val_loss the best (the loss falls), so best and last differ.
    best = BestModelCheckpoint(monitor="val_loss", mode="max", save_weights_only=weights_only)
    model = make_estimator(store, validation="is_val", checkpoint_callback=best).fit(df)
    val_loss = model.getHistory()["val_loss"]
    assert val_loss[0] > 2 * val_loss[-1]
    rows = df.filter("is_val").collect()
    x = np.array([r.features.toArray() for r in rows], dtype=np.float32)
    y = np.array([r.label for r in rows])
    loss = model.getModel().evaluate(x, y, verbose=0, return_dict=True)["loss"]
    assert abs(loss - val_loss[0]) < abs(loss - val_loss[-1])


def test_a_resumed_fit_keeps_its_earlier_epochs_and_its_best_model(local_spark, store, tmp_path) -> None:
    from collective.keras.callbacks import BestModelCheckpoint
    from spark_hvd import RunError
    from spark_hvd.keras.checkpoint import load_checkpoint
    from spark_hvd.keras.saving import model_from_bytes

    df = blobs(local_spark, 256)
    # 4 steps an epoch; transformation_fn runs per row, so rank 1 fails in its 6th batch (epoch 1).
    failing = FailOnce(str(tmp_path / "failed-once"), rank=1, after_calls=5 * 32)

    def estimator():
        best = BestModelCheckpoint(monitor="loss", mode="max")    # the first epoch's is the best
        return make_estimator(store, run_id="resumed", transformation_fn=failing, checkpoint_callback=best)

    with pytest.raises(RunError, match="injected failure on rank 1"):
        estimator().fit(df)
    first = load_checkpoint(store, "resumed")
    assert first.epoch == 0 and first.callback.best == pytest.approx(first.history[0]["loss"])

    model = estimator().fit(df)
    history = model.getHistory()
    assert len(history["loss"]) == 3
    assert history["loss"][0] == first.history[0]["loss"]        # carried over, not retrained
    final = load_checkpoint(store, "resumed")
    # A resumed callback that had forgotten its best would have saved a later epoch's model.
    assert final.callback.best == pytest.approx(history["loss"][0])
    best_weights = model_from_bytes(final.callback.blob, {"class_accuracy": class_accuracy}).get_weights()
    for returned, expected in zip(model.getModel().get_weights(), best_weights):
        np.testing.assert_array_equal(returned, expected)
    last_weights = model_from_bytes(final.model, {"class_accuracy": class_accuracy}).get_weights()
    assert not all(np.array_equal(a, b) for a, b in zip(best_weights, last_weights))


# --- reshapes ----------------------------------------------------------------------------------

def test_a_flat_vector_feeds_an_image_input_and_a_float_label_a_sparse_loss(local_spark, store) -> None:
    from pyspark.sql import functions as F

    df = blobs(local_spark, 300, features=16).withColumn("label", F.col("label").cast("double"))
    model = make_estimator(store, model=keras_models.image_classifier(4, 3)).fit(df)
    assert model.getHistory()["class_accuracy"][-1] > 0.9
    assert accuracy(model.transform(with_ids(df))) > 0.9


def test_label_shapes_and_output_shapes_decide_a_labels_reshape() -> None:
    from spark_hvd.keras.batch_arrays import label_row_shape, resolve_label_shapes

    labels, outputs = [np.zeros((2,)), np.zeros((2, 4))], [np.zeros((2, 1)), np.zeros((2, 2, 2))]
    assert resolve_label_shapes(None, labels, outputs, ["a", "b"]) == ((1,), (2, 2))
    class_indices = resolve_label_shapes(None, [np.zeros((2,))], [np.zeros((2, 3))], ["a"])
    assert class_indices == (None,)
    # Horovod's label_shapes hold the batch dimension; a shape without it is per row.
    assert label_row_shape([-1, 1]) == (1,) and label_row_shape([None, 2, 2]) == (2, 2)
    assert label_row_shape([3]) == (3,)
    assert resolve_label_shapes([[-1], [-1, 4]], labels, outputs, ["a", "b"]) == ((), (4,))


# --- KerasModel(...) and persistence --------------------------------------------------------------

def test_keras_model_wraps_a_trained_model_without_a_fit(local_spark, tmp_path) -> None:
    from pyspark.ml.linalg import Vectors, VectorUDT
    from pyspark.sql.types import LongType, StructField, StructType

    from spark_hvd.keras import KerasModel

    trained = keras_models.image_classifier(4, 3, seed=3)
    rng = np.random.default_rng(0)
    points = rng.normal(size=(50, 16))
    schema = StructType([StructField("features", VectorUDT()), StructField("label", LongType())])
    df = with_ids(local_spark.createDataFrame([(Vectors.dense(p.tolist()), 0) for p in points], schema))
    wrapped = KerasModel(history={"loss": [1.5, 0.5]}, model=trained, feature_columns=["features"],
                         label_columns=["label"], custom_objects={"class_accuracy": class_accuracy},
                         run_id="wrapped", _floatx="float32")
    assert wrapped.getOutputCols() == ["label__output"] and wrapped.getRunId() == "wrapped"
    assert wrapped.getHistory() == {"loss": [1.5, 0.5]} and wrapped.getModel() is trained
    expected = trained.predict(points.astype(np.float32).reshape(-1, 4, 4, 1), verbose=0)
    # The flat 16-vector is reshaped to the model's (4, 4, 1) input, as in training.
    np.testing.assert_allclose(predictions(wrapped.transform(df)), expected, rtol=1e-5, atol=1e-6)
    path = str(tmp_path / "wrapped")
    wrapped.save(path)
    loaded = KerasModel.load(path)
    assert loaded.getHistory() == {"loss": [1.5, 0.5]} and loaded.getRunId() == "wrapped"
    np.testing.assert_allclose(predictions(loaded.transform(df)), expected, rtol=1e-5, atol=1e-6)


def test_an_unfitted_pipeline_saves_loads_and_fits(local_spark, store, tmp_path) -> None:
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    from spark_hvd.keras import KerasEstimator

    epochs_dir = tmp_path / "epochs"
    epochs_dir.mkdir()
    raw = blobs(local_spark, 300).withColumn("arr", vector_to_array("features"))
    raw = raw.select(*[F.col("arr")[i].alias(f"x{i}") for i in range(4)], "label")
    assembler = VectorAssembler(inputCols=[f"x{i}" for i in range(4)], outputCol="features")
    estimator = make_estimator(store, epochs=2, callbacks=[EpochLog(str(epochs_dir))],
                               custom_objects={"class_accuracy": class_accuracy})
    path = str(tmp_path / "pipeline")
    Pipeline(stages=[assembler, estimator]).save(path)
    loaded = Pipeline.load(path)
    copy = loaded.getStages()[-1]
    assert isinstance(copy, KerasEstimator) and copy.uid == estimator.uid
    for original, restored in zip(estimator.getModel().get_weights(), copy.getModel().get_weights()):
        np.testing.assert_array_equal(original, restored)
    assert copy.getOptimizer().get_config() == estimator.getOptimizer().get_config()
    assert copy.getLoss().get_config() == estimator.getLoss().get_config()
    assert isinstance(copy.getCallbacks()[0], EpochLog) and "class_accuracy" in copy.getCustomObjects()
    fitted = loaded.fit(raw)
    assert [e["epoch"] for e in read_epoch_logs(str(epochs_dir), 0)] == [0, 1]
    scores = predictions(fitted.transform(with_ids(raw)))
    labels = np.array([r.label for r in with_ids(raw).orderBy("id").select("label").collect()])
    assert (scores.argmax(axis=1) == labels).mean() > 0.9


# --- BestModelCheckpoint alone ------------------------------------------------------------------

def test_best_model_checkpoint_is_horovods_save_best_only_model_checkpoint(tmp_path) -> None:
    from collective.keras.callbacks import BestModelCheckpoint

    best = BestModelCheckpoint(monitor="loss", mode="max", filepath=str(tmp_path / "best.keras"))
    assert isinstance(best, keras.callbacks.ModelCheckpoint) and best.save_best_only
    assert BestModelCheckpoint(save_weights_only=True).filepath.endswith(".weights.h5")
    net = keras_models.slope()
    net.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x = np.linspace(-1, 1, 32).astype(np.float32)
    fitted = net.fit(x, 2 * x, epochs=3, batch_size=8, verbose=0, callbacks=[best])
    assert best.best == pytest.approx(fitted.history["loss"][0])     # max mode keeps the first epoch's
    assert keras.saving.load_model(str(tmp_path / "best.keras")) is not None


def test_a_nan_loss_stops_the_fit_on_the_rank_that_saw_it(local_spark, store) -> None:
    from pyspark.ml.functions import array_to_vector, vector_to_array
    from pyspark.sql import functions as F

    from spark_hvd import RunError

    df = blobs(local_spark, 128)
    arrays = vector_to_array("features")
    poisoned = df.withColumn("features", array_to_vector(F.transform(arrays, lambda x: x * F.lit(float("nan")))))
    # A linear model: oneDNN's fused ReLU maps NaN to 0 on some CPUs (AVX-512), which would hide the NaN.
    linear = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    with pytest.raises(RunError, match=r"NonFiniteLossError: rank \d: the training loss is nan at epoch 0, step 0"):
        make_estimator(store, model=linear, epochs=1, check_finite=False).fit(poisoned)
