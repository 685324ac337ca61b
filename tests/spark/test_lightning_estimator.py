"""spark_hvd.lightning.TorchEstimator on local[2] (2 ranks): fit, transform, save and load (alone and in a
Pipeline), resume by run_id, validation metrics, callbacks on every rank, sync_dist, a Horovod-era module,
exact agreement with one process, and bad input."""

from __future__ import annotations

import io
import json

import cloudpickle
import numpy as np
import pytest

pytest.importorskip("pytorch_lightning")

import torch  # noqa: E402

import lightning_models  # noqa: E402
from estimator_data import assert_fit_fails_before_launch, blobs, features_labels_predictions, predictions, with_ids, xor_frame  # noqa: E402,E501
from lightning_models import (  # noqa: E402
    Classifier, FailOnceAtEpoch, HorovodEraCounter, HorovodEraNet, LegacyConvNet, LegacyXor, RankLog, Regressor64, Xor)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


@pytest.fixture(scope="module", autouse=True)
def ship_lightning_models():
    cloudpickle.register_pickle_by_value(lightning_models)
    yield
    cloudpickle.unregister_pickle_by_value(lightning_models)


def make_estimator(store, **overrides):
    from spark_hvd.lightning import TorchEstimator

    settings = dict(num_proc=2, model=Classifier(), feature_cols=["features"], label_cols=["label"], batch_size=32,
                    epochs=3, store=store, verbose=0)
    settings.update(overrides)
    return TorchEstimator(**settings)


def _walk(store, path: str) -> list[str]:
    children = store.list(path)
    return [leaf for child in children for leaf in (_walk(store, child) if store.list(child) else [child])]


def rank_logs(directory) -> dict[int, list]:
    return {rank: json.loads((directory / f"rank-{rank}.json").read_text()) for rank in (0, 1)}


def test_fit_validates_logs_across_ranks_transforms_saves_and_loads(local_spark, store, tmp_path) -> None:
    from spark_hvd.lightning import TorchModel

    (tmp_path / "ranks").mkdir()
    df = blobs(local_spark, 640)
    model = make_estimator(store, validation="is_val", callbacks=[RankLog(str(tmp_path / "ranks"))]).fit(df)

    # Horovod's Lightning history: the metrics logged last, as tensors.
    history = model.getHistory()
    assert {"train_loss", "val_loss", "val_acc", "rank_mean", "rank_here"} <= set(history)
    assert all(isinstance(value, torch.Tensor) for value in history.values())
    assert float(history["val_acc"]) > 0.9
    assert float(history["rank_mean"]) == pytest.approx(0.5)     # (0 + 1) / 2: sync_dist averaged it
    assert float(history["rank_here"]) == 0.0                    # rank 0's own value
    epochs = model.getEpochMetrics()
    assert [e["epoch"] for e in epochs] == [0, 1, 2]
    # Where each epoch's time went, apart from the logged metrics.
    times = model.getEpochTimes()
    assert [entry["epoch"] for entry in times] == [0, 1, 2]
    assert all(entry["ranks"] == 2 and entry["slowest_rank"] in (0, 1) and
               min(entry["input_s"], entry["compute_s"], entry["communication_s"]) >= 0 for entry in times)
    assert epochs[-1]["val_loss"] < epochs[0]["val_loss"]
    # The default logger's files (TensorBoard's, Horovod's default: requirements-dev.txt installs tensorboard)
    # were copied under the Store.
    logs = store.get_logs_path(model.getRunId())
    assert store.exists(logs) and any("events.out.tfevents." in p for p in _walk(store, logs))

    # The callback ran on both ranks, each for the same lockstep number of batches per epoch.
    steps = 512 // (2 * 32)
    for rank, runs in rank_logs(tmp_path / "ranks").items():
        assert runs == [{"rank": rank, "world_size": 2, "batches": {"0": steps, "1": steps, "2": steps}}]

    test = with_ids(blobs(local_spark, 200, partitions=3))
    out = model.transform(test)
    assert out.columns == test.columns + ["label__output"]
    features, labels, logits = features_labels_predictions(out)
    assert logits.shape == (200, 3)
    assert (logits.argmax(axis=1) == labels).mean() > 0.9
    module = model.getModel()
    assert isinstance(module, Classifier) and not module.training
    with torch.no_grad():
        expected = module(torch.from_numpy(features)).double().numpy()
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-6)

    path = str(tmp_path / "saved")
    model.save(path)
    loaded = TorchModel.load(path)
    assert loaded.uid == model.uid
    assert {k: float(v) for k, v in loaded.getHistory().items()} == {k: float(v) for k, v in history.items()}
    assert loaded.getEpochMetrics() == epochs
    np.testing.assert_array_equal(predictions(loaded.transform(test)), predictions(out))


def regression_rows(rows: int = 64, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3))
    return x, x @ np.array([1.5, -2.0, 0.5]) + 0.3 + rng.normal(scale=0.1, size=rows)


@pytest.mark.parametrize("batch_size, accumulate", [(32, 1), (16, 2)], ids=["whole-shard", "accumulated-halves"])
def test_two_ranks_train_what_one_process_trains_at_num_proc_times_the_rate(local_spark, store, batch_size,
                                                                            accumulate) -> None:
    """Each optimizer step sees a rank's whole 32-row shard (one batch, or two accumulated halves), so the
    averaged gradient is the full-batch gradient; Horovod's rule multiplies the rate by num_proc. One
    process doing full-batch SGD at lr * 2 must therefore end with the same float64 weights."""
    from pyspark.ml.linalg import Vectors

    from spark_hvd.lightning import TorchEstimator

    x, y = regression_rows()
    df = local_spark.createDataFrame([(Vectors.dense(a.tolist()), float(b)) for a, b in zip(x, y)], ["x", "y"])
    epochs, lr = 6, 0.05
    fitted = TorchEstimator(num_proc=2, model=Regressor64(lr=lr), feature_cols=["x"], label_cols=["y"],
                            batch_size=batch_size, backward_passes_per_step=accumulate, epochs=epochs,
                            shuffle=False, store=store, verbose=0).fit(df)

    reference = Regressor64(lr=lr)
    optimizer = torch.optim.SGD(reference.parameters(), lr=lr * 2, momentum=0.9)
    for _ in range(epochs):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(reference(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        optimizer.step()
    trained = fitted.getModel().state_dict()
    for name, value in reference.state_dict().items():
        assert trained[name].dtype == torch.float64
        np.testing.assert_allclose(trained[name].numpy(), value.numpy(), rtol=1e-12, atol=1e-12)
    assert [e["epoch"] for e in fitted.getEpochMetrics()] == list(range(epochs))


def test_pipeline_with_the_estimator_saves_loads_and_transforms(local_spark, store, tmp_path) -> None:
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    raw = blobs(local_spark, 256).withColumn("arr", vector_to_array("features"))
    raw = raw.select(*[F.col("arr")[i].alias(f"x{i}") for i in range(4)], "label")
    assembler = VectorAssembler(inputCols=[f"x{i}" for i in range(4)], outputCol="features")
    estimator = make_estimator(store, epochs=1, output_cols=["scores"], debug_data_loader=True)
    fitted = Pipeline(stages=[assembler, estimator]).fit(raw)
    path = str(tmp_path / "pipeline")
    fitted.save(path)
    loaded = PipelineModel.load(path)
    test = with_ids(raw)
    np.testing.assert_array_equal(predictions(loaded.transform(test), "scores"),
                                  predictions(fitted.transform(test), "scores"))


def resume_state(store, run_id: str) -> dict:
    """The recorder's state inside the run's resume checkpoint, read straight from the Store."""
    from spark_hvd.lightning.rank_callbacks import RECORDER_STATE_KEY
    from spark_hvd.lightning.trainer import RESUME_FILE

    blob = store.read_bytes(f"{store.get_checkpoint_path(run_id)}/{RESUME_FILE}")
    return torch.load(io.BytesIO(blob), weights_only=False)["callbacks"][RECORDER_STATE_KEY]


def test_a_failed_fit_resumes_from_its_last_epoch(local_spark, store, tmp_path) -> None:
    from spark_hvd import RunError

    (tmp_path / "ranks").mkdir()
    df = blobs(local_spark, 256)
    callbacks = [FailOnceAtEpoch(str(tmp_path / "failed-once"), rank=1, epoch=2), RankLog(str(tmp_path / "ranks"))]
    with pytest.raises(RunError, match="injected failure on rank 1 at epoch 2") as failure:
        make_estimator(store, run_id="resumable", callbacks=callbacks).fit(df)
    assert failure.value.rank == 1
    before = resume_state(store, "resumable")["epoch_metrics"]
    assert [e["epoch"] for e in before] == [0, 1]

    model = make_estimator(store, run_id="resumable", callbacks=callbacks).fit(df)
    epochs = model.getEpochMetrics()
    assert [e["epoch"] for e in epochs] == [0, 1, 2]
    assert epochs[:2] == before                   # carried over, not retrained
    # The second fit trained epoch 2 only, on both ranks.
    assert {rank: runs[-1]["batches"] for rank, runs in rank_logs(tmp_path / "ranks").items()} == \
        {0: {"2": 4}, 1: {"2": 4}}
    assert [e["epoch"] for e in resume_state(store, "resumable")["epoch_metrics"]] == [0, 1, 2]

    # A finished run fits again without training, to the same model.
    again = make_estimator(store, run_id="resumable").fit(df)
    assert again.getEpochMetrics() == epochs
    for name, value in model.getModel().state_dict().items():
        torch.testing.assert_close(again.getModel().state_dict()[name], value)


def test_a_horovod_era_module_and_callbacks_train_unchanged(local_spark, store, tmp_path) -> None:
    """The shape of Horovod's Lightning MNIST example: validation_epoch_end, 1.x callback hooks, a
    ModelCheckpoint on val_loss with EarlyStopping, input_shapes, float labels; the model returned holds
    the best checkpoint's weights."""
    from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
    from pyspark.sql import functions as F

    (tmp_path / "ranks").mkdir()
    df = blobs(local_spark, 320).withColumn("label", F.col("label").cast("double"))
    callbacks = [HorovodEraCounter(str(tmp_path / "ranks")),
                 ModelCheckpoint(monitor="val_loss", mode="min", save_top_k=1),
                 EarlyStopping(monitor="val_loss", min_delta=0.001, patience=3, mode="min")]
    model = make_estimator(store, model=HorovodEraNet(), input_shapes=[[-1, 4]], validation=0.1, epochs=3,
                           callbacks=callbacks).fit(df).setOutputCols(["label_prob"])
    for rank, counts in rank_logs(tmp_path / "ranks").items():
        assert counts["init"] == 2
        assert counts["train_epoch_end"] == counts["validation_epoch_end"] == 3
        assert counts["epoch_end"] == 6
        assert np.isfinite(counts["avg_val_loss"])
    assert "avg_val_loss" in model.getHistory()

    best = [p for p in store.list(store.get_checkpoint_path(model.getRunId())) if "epoch=" in p]
    assert len(best) == 1
    saved = torch.load(io.BytesIO(store.read_bytes(best[0])), weights_only=False)
    # Kept unscaled (the module's 0.05, not 0.05 * 2 ranks), so it trains on one process as it is.
    assert saved["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(0.05)
    for name, value in saved["state_dict"].items():
        torch.testing.assert_close(model.getModel().state_dict()[name], value)

    test = with_ids(blobs(local_spark, 100, partitions=2))
    out = model.transform(test)
    assert "label_prob" in out.columns
    _, _, probs = features_labels_predictions(out, "label_prob")
    assert probs.shape == (100, 3)
    np.testing.assert_allclose(np.exp(probs).sum(axis=1), 1.0, rtol=1e-5)   # log_softmax, from forward


def test_input_shapes_fit_the_batches_forward_gets_as_in_horovods_lightning(local_spark, store) -> None:
    """Horovod's Lightning test_fit_model: training_step takes the columns as they are, and transform feeds forward
    one row at a time, so input_shapes=[[2]] with batch_size=4 is valid."""
    df = xor_frame(local_spark)
    fitted = make_estimator(store, model=Xor(), input_shapes=[[2]], label_cols=["y"], validation=0.2, batch_size=4,
                            epochs=2).fit(df)
    assert len(fitted.getModel()(torch.ones([1, 2], dtype=torch.int32))) == 1
    rows = fitted.transform(with_ids(df)).orderBy("id").collect()
    with torch.no_grad():
        expected = [fitted.getModel()(torch.tensor(r.features.toArray())).item() for r in rows]
    assert [r.y__output for r in rows] == pytest.approx(expected)


def test_a_plain_torch_module_with_optimizer_and_loss_trains_as_horovods_legacy_path(local_spark, store) -> None:
    """Horovod's test_legacy_fit_model: a torch.nn.Module, an optimizer and a loss; forward(features=...) by the
    column's name, sample weights; the fit returns the plain module, trained."""
    model = LegacyXor()
    before = {name: value.clone() for name, value in model.state_dict().items()}
    fitted = make_estimator(store, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                            loss=torch.nn.functional.binary_cross_entropy, input_shapes=[[2]], label_cols=["y"],
                            batch_size=4, epochs=2, sample_weight_col="weight").fit(xor_frame(local_spark))
    trained = fitted.getModel()
    assert type(trained) is LegacyXor
    prediction = trained(torch.ones([1, 2], dtype=torch.int32))
    assert len(prediction) == 1 and prediction.dtype == torch.float32
    assert any(not torch.equal(before[name], value) for name, value in trained.state_dict().items())
    assert "train_loss" in fitted.getHistory()


def test_a_legacy_conv_net_trains_on_reshaped_batches_and_validates(local_spark, store) -> None:
    """Horovod's legacy MNIST example in small: input_shapes [-1, 1, 2, 2] shapes each batch for the conv net, the
    loss casts the float labels, validation logs val_loss; transform gives what the trained net computes."""
    from pyspark.sql import functions as F

    df = blobs(local_spark, 320).withColumn("label", F.col("label").cast("double"))
    model = LegacyConvNet()
    fitted = make_estimator(store, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5),
                            loss=lambda output, target: torch.nn.functional.nll_loss(output, target.long()),
                            input_shapes=[[-1, 1, 2, 2]], validation=0.2).fit(df)
    history = fitted.getHistory()
    assert {"train_loss", "val_loss"} <= set(history) and float(history["val_loss"]) < 0.5
    features, labels, log_probs = features_labels_predictions(fitted.transform(with_ids(blobs(local_spark, 100))))
    with torch.no_grad():
        expected = fitted.getModel()(torch.tensor(features, dtype=torch.float32).reshape(-1, 1, 2, 2)).double().numpy()
    np.testing.assert_allclose(log_probs, expected, rtol=1e-5, atol=1e-6)
    assert (log_probs.argmax(axis=1) == labels).mean() > 0.9


class NotLightning(torch.nn.Module):
    def forward(self, x):
        return x


BAD_INPUTS = [
    (dict(feature_cols=["nope"]), None, "nope"),
    (dict(model=NotLightning()), None, "optimizer must be a torch.optim.Optimizer"),
    (dict(model="not a module"), None, "LightningModule, or a torch.nn.Module"),
    (dict(optimizer=torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)), None, "configure_optimizers"),
    (dict(trainer_args={"strategy": "ddp"}), None, "strategy"),
    (dict(callbacks=["not a callback"]), None, "callbacks"),
]


@pytest.mark.parametrize("overrides, data, message", BAD_INPUTS,
                         ids=["missing-column", "plain-module-without-optimizer", "not-a-module", "optimizer", "trainer-strategy", "callback"])
def test_bad_input_fails_before_launch(local_spark, store, overrides, data, message) -> None:
    assert_fit_fails_before_launch(local_spark, store, make_estimator, overrides, data, message)


def test_horovod_names_exist() -> None:
    import pytorch_lightning as pl
    from packaging.version import Version

    from spark_hvd.lightning import TorchEstimator
    from spark_hvd.lightning.estimator import MIN_PL_VERSION

    assert Version(pl.__version__) >= Version(MIN_PL_VERSION)
    estimator = TorchEstimator(num_gpus=0, log_every_n_steps=5, trainer_args={"gradient_clip_val": 1.0})
    assert estimator.getNumGPUs() == 0 and estimator.getLogEveryNSteps() == 5
    assert estimator.getTrainerArgs() == {"gradient_clip_val": 1.0}
    assert estimator.getLearningRateScaling() == "linear"


def test_a_data_module_class_is_built_on_every_rank_with_horovods_keywords(local_spark, store, tmp_path) -> None:
    from lightning_models import ParquetShardData

    data_module = type("RecordedParquetShardData", (ParquetShardData,), {"record_dir": str(tmp_path)})
    model = make_estimator(store, data_module=data_module, epochs=1).fit(blobs(local_spark, 256))
    assert "train_loss" in model.getHistory()
    for rank in (0, 1):
        given = json.loads((tmp_path / f"kwargs-rank-{rank}.json").read_text())
        assert given["cur_shard"] == rank and given["shard_count"] == 2 and given["steps"] == 256 // (2 * 32)
        assert given["fields"] == ["features", "label"] and given["has_val"] is False
        assert given["train_dir"].startswith("file://")


def test_an_unfitted_pipeline_holding_the_estimator_saves_and_loads(local_spark, store, tmp_path) -> None:
    from pyspark.ml import Pipeline

    from spark_hvd.lightning import TorchEstimator

    estimator = make_estimator(store, trainer_args={"gradient_clip_val": 0.5}, log_every_n_steps=7)
    Pipeline(stages=[estimator]).write().save(str(tmp_path / "unfitted"))
    loaded = Pipeline.load(str(tmp_path / "unfitted")).getStages()[0]
    assert isinstance(loaded, TorchEstimator) and loaded.uid == estimator.uid
    assert isinstance(loaded.getModel(), Classifier)
    assert loaded.getTrainerArgs() == {"gradient_clip_val": 0.5} and loaded.getLogEveryNSteps() == 7


def test_checkpoints_keep_the_unscaled_rate_and_loading_scales_it_again() -> None:
    from spark_hvd.lightning.learning_rate import scale_checkpoint_learning_rates, scale_live_learning_rates

    module = Regressor64()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    scale_live_learning_rates([optimizer], [type("Config", (), {"scheduler": scheduler})()], 4)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.4) and scheduler.base_lrs == [pytest.approx(0.4)]
    checkpoint = {"optimizer_states": [optimizer.state_dict()], "lr_schedulers": [scheduler.state_dict()]}
    scale_checkpoint_learning_rates(checkpoint, 1 / 4)
    assert checkpoint["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(0.1)
    assert checkpoint["lr_schedulers"][0]["base_lrs"] == [pytest.approx(0.1)]
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.4)       # the live ones are left alone
    scale_checkpoint_learning_rates(checkpoint, 2)
    assert checkpoint["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(0.2)


def test_terminate_on_nan_stops_at_a_non_finite_loss() -> None:
    from spark_hvd.lightning.rank_callbacks import TerminateOnNan

    trainer = type("Trainer", (), {"current_epoch": 1})()
    TerminateOnNan().on_train_batch_end(trainer, None, {"loss": torch.tensor(0.5)}, None, 0)
    with pytest.raises(ValueError, match="nan at epoch 1, batch 3"):
        TerminateOnNan().on_train_batch_end(trainer, None, torch.tensor(float("nan")), None, 3)
