"""KerasEstimator on a real standalone cluster (a master and two one-core workers on 127.0.0.1)."""

from __future__ import annotations

import cloudpickle
import numpy as np
import pytest

pytest.importorskip("keras")

import keras_models  # noqa: E402
from estimator_data import blobs, features_labels_predictions, predictions, with_ids  # noqa: E402
from test_keras_estimator import make_estimator  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


@pytest.fixture(scope="module", autouse=True)
def ship_test_models_by_value():
    cloudpickle.register_pickle_by_value(keras_models)
    yield
    cloudpickle.unregister_pickle_by_value(keras_models)


def test_fit_transform_save_load_on_a_standalone_cluster(standalone_spark, tmp_path) -> None:
    from spark_hvd import KerasModel, Store

    df = blobs(standalone_spark, 400)
    model = make_estimator(Store.create(str(tmp_path / "store")), epochs=3, validation=0.25).fit(df)
    assert model.getEpochMetrics()[-1]["val_class_accuracy"] > 0.9
    test = with_ids(blobs(standalone_spark, 100, partitions=2))
    features, labels, scores = features_labels_predictions(model.transform(test))
    assert (scores.argmax(axis=1) == labels).mean() > 0.9
    np.testing.assert_allclose(scores, model.getModel().predict(features, verbose=0), rtol=1e-5, atol=1e-6)
    model.save(str(tmp_path / "model"))
    np.testing.assert_array_equal(predictions(KerasModel.load(str(tmp_path / "model")).transform(test)), scores)
