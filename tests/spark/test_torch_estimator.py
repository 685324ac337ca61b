"""TorchEstimator on local[2]: fit, transform, save/load, Pipeline, resume, data variants, bad input."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch import nn

from estimator_data import assert_fit_fails_before_launch, blobs, in_two_partitions, predictions, with_ids
from estimator_models import FailOnce, Slope, accuracy, class_loss, classifier, slow_row

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def make_estimator(store, **overrides):
    from spark_hvd import TorchEstimator

    model = classifier(4, 3)
    settings = dict(num_proc=2, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.02),
                    loss=class_loss, metrics=[accuracy], feature_cols=["features"],
                    label_cols=["label"], batch_size=32, epochs=3, store=store, verbose=0)
    settings.update(overrides)
    return TorchEstimator(**settings)






def test_fit_transform_save_load_round_trip(local_spark, store, tmp_path) -> None:
    from spark_hvd import TorchModel

    df = blobs(local_spark, 600)
    model = make_estimator(store, validation=0.2).fit(df)
    metrics = model.getEpochMetrics()
    assert [h["epoch"] for h in metrics] == [0, 1, 2]
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(metrics[0])
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    assert metrics[-1]["val_accuracy"] > 0.9
    # getHistory() is Horovod's: per epoch, train and validation with the metric groups.
    history = model.getHistory()
    assert [sorted(h) for h in history] == [["epoch", "train", "validation"]] * 3
    assert history[-1]["train"] == {"loss": metrics[-1]["loss"], "all_metrics": [{"group_0_label": metrics[-1]["accuracy"]}]}
    assert history[-1]["validation"]["all_metrics"] == [{"group_0_label": metrics[-1]["val_accuracy"]}]

    test = with_ids(blobs(local_spark, 200, seed=0, partitions=3))
    out = model.transform(test)
    assert out.columns == test.columns + ["label__output"]
    logits = predictions(out)
    assert logits.shape == (200, 3)
    labels = np.array([r.label for r in test.orderBy("id").collect()])
    assert (logits.argmax(axis=1) == labels).mean() > 0.9
    # The column holds exactly what the module computes.
    features = np.array([r.features.toArray() for r in test.orderBy("id").collect()], dtype=np.float32)
    with torch.no_grad():
        expected = model.getModel()(torch.from_numpy(features)).double().numpy()
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-6)

    path = str(tmp_path / "saved")
    model.save(path)
    loaded = TorchModel.load(path)
    assert loaded.uid == model.uid
    assert loaded.getHistory() == history and loaded.getEpochMetrics() == metrics
    assert type(loaded.getOptimizer()) is torch.optim.Adam
    assert loaded.getOptimizer().param_groups[0]["lr"] == pytest.approx(0.02)   # unscaled, as Horovod keeps it
    assert loaded.getFeatureColumns() == ["features"] and loaded.getOutputCols() == ["label__output"]
    np.testing.assert_array_equal(predictions(loaded.transform(test)), logits)


def test_pipeline_with_vector_assembler_saves_loads_and_transforms(local_spark, store, tmp_path) -> None:
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    raw = blobs(local_spark, 400).withColumn("arr", vector_to_array("features"))
    raw = raw.select(*[F.col("arr")[i].alias(f"x{i}") for i in range(4)], "label")
    assembler = VectorAssembler(inputCols=[f"x{i}" for i in range(4)], outputCol="features")
    estimator = make_estimator(store, epochs=2, output_cols=["scores"])
    fitted = Pipeline(stages=[assembler, estimator]).fit(raw)
    path = str(tmp_path / "pipeline")
    fitted.save(path)
    loaded = PipelineModel.load(path)
    test = with_ids(raw)
    np.testing.assert_array_equal(predictions(loaded.transform(test), "scores"),
                                  predictions(fitted.transform(test), "scores"))


def test_a_failed_fit_resumes_from_its_last_checkpoint(local_spark, store, tmp_path) -> None:
    from spark_hvd import RunError
    from spark_hvd.torch.checkpoint import load_checkpoint

    df = blobs(local_spark, 256)
    # 256 rows / (2 ranks * 32) = 4 steps an epoch: the 6th batch (rows 161-192) on rank 1 is in epoch 2.
    failing = FailOnce(str(tmp_path / "failed-once"), rank=1, after_calls=5 * 32)
    with pytest.raises(RunError, match="injected failure on rank 1") as failure:
        make_estimator(store, run_id="resumable", epochs=3, transformation_fn=failing).fit(df)
    assert failure.value.rank == 1
    checkpoint = load_checkpoint(store, "resumable")
    assert checkpoint is not None and checkpoint["epoch"] == 0
    first_epoch = checkpoint["history"][0]

    model = make_estimator(store, run_id="resumable", epochs=3, transformation_fn=failing).fit(df)
    history = model.getHistory()
    assert [h["epoch"] for h in history] == [0, 1, 2]
    assert history[0] == first_epoch          # carried over, not retrained
    assert load_checkpoint(store, "resumable")["epoch"] == 2


def test_validation_by_boolean_column(local_spark, store) -> None:
    model = make_estimator(store, validation="is_val", epochs=2).fit(blobs(local_spark, 400))
    assert "val_loss" in model.getEpochMetrics()[-1]


def test_validation_by_numeric_column_and_zero_fraction(local_spark, store) -> None:
    from pyspark.sql import functions as F

    df = blobs(local_spark, 400).withColumn("val_flag", F.col("is_val").cast("int") * 3)
    model = make_estimator(store, validation="val_flag", epochs=1).fit(df)
    assert "validation" in model.getHistory()[-1]
    no_split = make_estimator(store, validation=0.0, epochs=1).fit(df)   # Horovod: 0 means no validation
    assert "validation" not in no_split.getHistory()[-1]


def test_sample_weights_decide_which_rows_count(local_spark, store) -> None:
    from spark_hvd import TorchEstimator

    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, size=400)
    clean = np.arange(400) % 2 == 0
    # Half the rows carry a wrong slope; weight 0 must make them irrelevant.
    y = np.where(clean, 2.0 * x, -3.0 * x)
    df = local_spark.createDataFrame(
        [(float(a), float(b), float(c)) for a, b, c in zip(x, y, clean)], "x double, y double, w double")
    slopes = {}
    for weighted in (True, False):
        model = Slope()
        estimator = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
                                   loss=nn.MSELoss(), feature_cols=["x"], label_cols=["y"],
                                   sample_weight_col="w" if weighted else None, batch_size=20, epochs=4,
                                   store=store, verbose=0)
        slopes[weighted] = estimator.fit(df).getModel().w.item()
    assert slopes[True] == pytest.approx(2.0, abs=0.05)
    assert slopes[False] == pytest.approx(-0.5, abs=0.3)


def test_very_uneven_partitions_finish(local_spark, store) -> None:
    uneven = in_two_partitions(blobs(local_spark, 550), 500)   # one partition holds 91% of the rows
    assert sorted(len(p) for p in uneven.rdd.glom().collect()) == [50, 500]
    model = make_estimator(store, epochs=1).fit(uneven)
    assert len(model.getHistory()) == 1


def test_params_are_spark_ml_params(store) -> None:
    estimator = make_estimator(store, batch_size=7)
    assert estimator.getBatchSize() == 7
    assert estimator.setBatchSize(9) is estimator and estimator.getBatchSize() == 9
    assert "batch_size: rows per step on each rank" in estimator.explainParams()
    copy = estimator.copy({estimator.epochs: 5})
    assert copy.getEpochs() == 5 and estimator.getEpochs() == 3 and copy.getBatchSize() == 9
    with pytest.raises(TypeError):
        type(estimator)(2)   # keyword-only, like every Spark ML stage
    with pytest.raises(TypeError, match="batch_size"):
        estimator.setBatchSize(0)


BAD_INPUTS = [
    (dict(feature_cols=["nope"]), None, "nope"),
    (dict(feature_cols=["name"]), None, "name"),
    (dict(loss=nn.MSELoss()), None, r"label column\(s\) \['label'\]"),
    (dict(), "empty", "empty"),
]


@pytest.mark.parametrize("overrides, data, message", BAD_INPUTS, ids=["missing", "dtype", "label-shape", "empty"])
def test_bad_input_fails_before_launch(local_spark, store, overrides, data, message) -> None:
    assert_fit_fails_before_launch(local_spark, store, make_estimator, overrides, data, message)



def test_the_model_reaches_the_ranks_in_the_run_payload_itself(store) -> None:
    """The model and its optimizer travel in spark_hvd.run's payload as objects, not as bytes pickled again
    inside it: one unpickling on the rank gives them, bound together, while the ranks still meet."""
    import dataclasses

    import cloudpickle

    from spark_hvd.estimator.base import FitPlan

    plan_fields = {f.name: None for f in dataclasses.fields(FitPlan) if f.default is dataclasses.MISSING}
    estimator = make_estimator(store)
    rank_fn = cloudpickle.loads(cloudpickle.dumps(estimator._rank_fn(FitPlan(**plan_fields))))
    objects = rank_fn.spec.objects
    assert isinstance(objects.model, nn.Module) and objects.model is not estimator.getModel()
    optimizer_params = {id(p) for group in objects.optimizer.param_groups for p in group["params"]}
    assert optimizer_params == {id(p) for p in objects.model.parameters()}


def test_each_epoch_says_where_its_time_went_and_a_slow_transformation_is_input_wait(local_spark, store) -> None:
    """The split is structural (never negative, every epoch, two ranks, a valid slowest rank) and apart from
    the epoch metrics; with transformation_fn sleeping in the loop, input is the largest share by far."""
    model = make_estimator(store, epochs=2, transformation_fn=slow_row, train_reader_num_workers=0).fit(
        blobs(local_spark, 256))
    times = model.getEpochTimes()
    assert [entry["epoch"] for entry in times] == [0, 1]
    for entry in times:
        assert entry["ranks"] == 2 and entry["slowest_rank"] in (0, 1)
        shares = entry["input_s"], entry["compute_s"], entry["communication_s"]
        assert min(shares) >= 0
        assert entry["input_s"] == max(shares), entry
    assert sum(sum((e["input_s"], e["compute_s"], e["communication_s"])) for e in times) \
        <= model.getFitTimings()["total"]
    assert not [key for key in model.getEpochMetrics()[0] if key.startswith("time")]
    assert model.copy().getEpochTimes() == times
