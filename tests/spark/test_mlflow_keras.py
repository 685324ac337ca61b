"""A KerasEstimator fit inside an active MLflow run logs a real MLflow model too: the keras flavour gives the
Keras model back, and the pyfunc predicts a pandas DataFrame of the feature columns as transform does."""

from __future__ import annotations

import cloudpickle
import numpy as np
import pytest

keras = pytest.importorskip("keras")
mlflow = pytest.importorskip("mlflow")

import keras_models  # noqa: E402
from estimator_data import blobs, predictions, with_ids  # noqa: E402
from keras_models import class_accuracy, classifier  # noqa: E402
from test_mlflow_logging import feature_frame, tracking  # noqa: E402,F401  (the sqlite store fixture)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


@pytest.fixture(scope="module", autouse=True)
def ship_test_models_by_value():
    cloudpickle.register_pickle_by_value(keras_models)
    yield
    cloudpickle.unregister_pickle_by_value(keras_models)


def test_keras_fit_logs_the_keras_flavour_and_a_pyfunc(local_spark, tracking, tmp_path) -> None:
    from spark_hvd import KerasEstimator, Store

    estimator = KerasEstimator(num_proc=2, model=classifier(4, 3), optimizer=keras.optimizers.Adam(0.02),
                               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                               metrics=[class_accuracy], feature_cols=["features"], label_cols=["label"],
                               batch_size=32, epochs=2, store=Store.create(str(tmp_path / "store")), verbose=0)
    with mlflow.start_run() as run:
        model = estimator.fit(blobs(local_spark, 300))
    run_id = run.info.run_id
    assert [m.step for m in tracking.get_metric_history(run_id, "loss")] == [0, 1]

    test = with_ids(blobs(local_spark, 40, seed=1))
    expected = predictions(model.transform(test))
    uri = f"runs:/{run_id}/model"
    predicted = mlflow.pyfunc.load_model(uri).predict(feature_frame(test))
    np.testing.assert_allclose(np.stack(predicted["label__output"].to_numpy()), expected, rtol=1e-5, atol=1e-6)
    # As with keras.saving.load_model, a custom metric of the compiled model is named on load.
    loaded = mlflow.keras.load_model(uri, custom_objects={"class_accuracy": class_accuracy})
    assert isinstance(loaded, keras.Model)
    np.testing.assert_allclose(np.asarray(loaded(np.stack(feature_frame(test)["features"]).astype("float32"))),
                               expected, rtol=1e-4, atol=1e-5)
