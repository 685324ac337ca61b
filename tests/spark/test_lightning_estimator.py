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
from estimator_data import assert_fit_fails_before_launch, blobs, features_labels_predictions, predictions, with_ids  # noqa: E402,E501
from lightning_models import Classifier, FailOnceAtEpoch, HorovodEraCounter, HorovodEraNet, RankLog, Regressor64  # noqa: E402,E501

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


@pytest.fixture(scope="module", autouse=True)
def ship_lightning_models():
    cloudpickle.register_pickle_by_value(lightning_models)
    yield
    cloudpickle.unregister_pickle_by_value(lightning_models)


@pytest.fixture
def store(tmp_path):
    from spark_hvd import Store

    return Store.create(str(tmp_path / "store"))


def make_estimator(store, **overrides):
    from spark_hvd.lightning import TorchEstimator

    settings = dict(num_proc=2, model=Classifier(), feature_cols=["features"], label_cols=["label"], batch_size=32,
                    epochs=3, store=store, verbose=0)
    settings.update(overrides)
    return TorchEstimator(**settings)


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
    assert epochs[-1]["val_loss"] < epochs[0]["val_loss"]

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
