"""Spark ML's classifier columns (rawPrediction, probability, prediction) beside Horovod's output column: Spark ML's
classification evaluators take them unchanged, for torch, Keras and Lightning; they survive save and load; by
default nothing is added; and bad settings are refused before launch."""

from __future__ import annotations

import cloudpickle
import numpy as np
import pytest

import keras_models
import lightning_models
from estimator_data import blobs
from estimator_models import class_loss, classifier
from spark_hvd.errors import InputError
from spark_hvd.estimator.classifier_outputs import ClassifierOutputs

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


@pytest.fixture(scope="module", autouse=True)
def ship_models_by_value():
    for module in (keras_models, lightning_models):
        cloudpickle.register_pickle_by_value(module)
    yield
    for module in (keras_models, lightning_models):
        cloudpickle.unregister_pickle_by_value(module)


def _accuracy(out) -> float:
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator

    return MulticlassClassificationEvaluator(labelCol="label", metricName="accuracy").evaluate(out)


def _area_under_roc(out) -> float:
    from pyspark.ml.evaluation import BinaryClassificationEvaluator

    return BinaryClassificationEvaluator(labelCol="label").evaluate(out)


def _classifier_columns(out) -> np.ndarray:
    rows = out.orderBy("features").select("rawPrediction", "probability", "prediction").collect()
    return np.array([[*row["rawPrediction"], *row["probability"], row["prediction"]] for row in rows])


def _torch_settings(store, **overrides) -> dict:
    import torch

    model = classifier(4, 3)
    return dict(num_proc=2, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.05), loss=class_loss,
                store=store, verbose=0, feature_cols=["features"], label_cols=["label"], batch_size=32, **overrides)


def test_torch_logits_give_spark_mls_columns_and_survive_save_and_load(local_spark, store, tmp_path) -> None:
    from spark_hvd.torch import TorchEstimator, TorchModel

    df = blobs(local_spark, 320)
    model = TorchEstimator(**_torch_settings(store, epochs=4, classification="logits")).fit(df)
    out = model.transform(df)
    assert out.columns == [*df.columns, "label__output", "rawPrediction", "probability", "prediction"]
    assert _accuracy(out) > 0.9
    row = out.first()
    assert len(row["rawPrediction"]) == 3 and sum(row["probability"]) == pytest.approx(1.0)
    assert row["prediction"] == float(np.argmax(row["label__output"]))
    model.write().overwrite().save(str(tmp_path / "model"))
    loaded = TorchModel.load(str(tmp_path / "model"))
    assert loaded.getClassification() == "logits"
    np.testing.assert_array_equal(_classifier_columns(loaded.transform(df)), _classifier_columns(out))


def test_keras_auto_reads_probabilities_from_the_loss_for_a_binary_model(local_spark, store) -> None:
    import keras

    from spark_hvd import KerasEstimator

    df = blobs(local_spark, 320, classes=2, seed=3)
    estimator = KerasEstimator(num_proc=2, model=keras_models.binary(4), optimizer=keras.optimizers.Adam(0.05),
                               loss="binary_crossentropy", feature_cols=["features"], label_cols=["label"],
                               batch_size=32, epochs=4, store=store, verbose=0, classification="auto",
                               predictionCol="class", rawPredictionCol="")
    model = estimator.fit(df)
    assert model.getClassification() == "probabilities"
    out = model.transform(df)
    assert out.columns == [*df.columns, "label__output", "probability", "class"]
    row = out.first()
    # Horovod's column is typed after the integer label, so it holds the rounded probability; ours keeps it.
    assert len(row["probability"]) == 2 and round(row["probability"][1]) == row["label__output"]
    assert sum(row["probability"]) == pytest.approx(1.0)
    from pyspark.ml.evaluation import BinaryClassificationEvaluator, MulticlassClassificationEvaluator

    assert BinaryClassificationEvaluator(labelCol="label", rawPredictionCol="probability").evaluate(out) > 0.95
    assert MulticlassClassificationEvaluator(labelCol="label", predictionCol="class",
                                             metricName="accuracy").evaluate(out) > 0.9


def test_lightning_logits_work_with_both_evaluators(local_spark, store) -> None:
    from spark_hvd.lightning import TorchEstimator

    df = blobs(local_spark, 320, classes=2, seed=5)
    model = TorchEstimator(num_proc=2, model=lightning_models.Classifier(classes=2), feature_cols=["features"],
                           label_cols=["label"], batch_size=32, epochs=3, store=store, verbose=0,
                           classification="logits").fit(df)
    out = model.transform(df)
    assert _accuracy(out) > 0.9 and _area_under_roc(out) > 0.95


def test_by_default_the_output_column_stays_alone_and_a_loaded_model_can_switch_on(local_spark, store) -> None:
    from spark_hvd.torch import TorchEstimator

    df = blobs(local_spark, 160)
    model = TorchEstimator(**_torch_settings(store, epochs=1)).fit(df)
    assert model.transform(df).columns == [*df.columns, "label__output"]
    model.setClassification("log_probabilities").setProbabilityCol("")
    assert model.transform(df).columns == [*df.columns, "label__output", "rawPrediction", "prediction"]
    with pytest.raises(InputError, match=r"classifier column\(s\) \['label'\] already exist"):
        model.setPredictionCol("label").transform(df)


def test_bad_settings_are_refused_before_launch(local_spark, store) -> None:
    from spark_hvd.torch import TorchEstimator

    df = blobs(local_spark, 64)
    settings = _torch_settings(store, epochs=1)
    with pytest.raises(InputError, match="classification='auto' cannot tell .* from the loss <function class_loss"):
        TorchEstimator(**settings, classification="auto").fit(df)
    with pytest.raises(InputError, match="classification must be one of"):
        TorchEstimator(**settings, classification="softmax").fit(df)
    with pytest.raises(InputError, match="for one label column; label_cols has 2"):
        TorchEstimator(**{**settings, "label_cols": ["label", "is_val"]}, classification="logits").fit(df)


def test_the_columns_follow_spark_mls_conventions() -> None:
    logits = np.array([[2.0, 0.0, -1.0], [-3.0, 1.0, 1.5]])
    raw, probability, prediction = ClassifierOutputs(0, "logits").values(logits)
    np.testing.assert_array_equal(raw, logits)
    expected = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(probability, expected)
    np.testing.assert_array_equal(prediction, [0.0, 2.0])
    raw, probability, prediction = ClassifierOutputs(0, "logits").values(np.array([[-2.0], [0.5]]))
    np.testing.assert_array_equal(raw, [[2.0, -2.0], [-0.5, 0.5]])          # the binary margins
    np.testing.assert_allclose(probability[:, 1], 1 / (1 + np.exp([2.0, -0.5])))
    np.testing.assert_array_equal(prediction, [0.0, 1.0])
    _, probability, prediction = ClassifierOutputs(0, "log_probabilities").values(np.log([[0.2, 0.8]]))
    np.testing.assert_allclose(probability, [[0.2, 0.8]])
    assert ClassifierOutputs(0, "probabilities", probability_col="").columns() == [
        ("rawPrediction", True), ("prediction", False)]
