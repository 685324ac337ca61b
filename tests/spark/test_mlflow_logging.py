"""MLflow as its users expect, on MLflow's sqlite tracking and registry store: a fit inside an active run logs
its params, each epoch's metrics while it runs, and the model as a real MLflow model (pyfunc over a pandas
DataFrame of the feature columns, the pytorch flavour, a signature) that loads and registers; a failed fit
ends its run FAILED with the epochs it finished."""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pytest
import torch

from estimator_data import blobs, predictions, with_ids
from estimator_models import FailOnce, accuracy, class_loss, classifier

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

mlflow = pytest.importorskip("mlflow")


@pytest.fixture(scope="module")
def tracking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """MLflow's sqlite tracking and registry store in a temporary folder, for this module."""
    folder = tmp_path_factory.mktemp("mlflow")
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{folder / 'mlflow.db'}")
    experiment = mlflow.create_experiment("spark-hvd-tests", artifact_location=str(folder / "artifacts"))
    mlflow.set_experiment(experiment_id=experiment)
    try:
        yield mlflow.tracking.MlflowClient()
    finally:
        mlflow.set_tracking_uri(previous)


def make_estimator(tmp_path, **overrides):
    from spark_hvd import Store, TorchEstimator

    model = classifier(4, 3)
    settings = dict(num_proc=2, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.02),
                    loss=class_loss, metrics=[accuracy], feature_cols=["features"], label_cols=["label"],
                    batch_size=32, epochs=2, store=Store.create(str(tmp_path / "store")), verbose=0)
    settings.update(overrides)
    return TorchEstimator(**settings)


def feature_frame(df: Any) -> Any:
    """The feature column as a user hands it to a pyfunc: a pandas DataFrame, one array per row."""
    import pandas as pd

    rows = df.orderBy("id").collect()
    return pd.DataFrame({"features": [np.array(r.features.toArray()) for r in rows]})


def test_fit_logs_a_loadable_registrable_mlflow_model(local_spark, tracking, tmp_path) -> None:
    df = blobs(local_spark, 400)
    with mlflow.start_run() as run:
        model = make_estimator(tmp_path, validation=0.2).fit(df)
    run_id = run.info.run_id
    assert tracking.get_run(run_id).info.status == "FINISHED"
    assert tracking.get_run(run_id).data.params["batch_size"] == "32"
    for metric in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert [m.step for m in tracking.get_metric_history(run_id, metric)] == [0, 1], metric

    test = with_ids(blobs(local_spark, 60, seed=1))
    expected = predictions(model.transform(test))
    uri = f"runs:/{run_id}/model"
    pyfunc = mlflow.pyfunc.load_model(uri)
    assert pyfunc.metadata.get_input_schema().input_names() == ["features"]
    assert pyfunc.metadata.get_output_schema().input_names() == ["label__output"]
    predicted = pyfunc.predict(feature_frame(test))
    assert list(predicted.columns) == ["label__output"]
    np.testing.assert_allclose(np.stack(predicted["label__output"].to_numpy()), expected, rtol=1e-6)

    # The framework's own flavour gives the trained module back.
    module = mlflow.pytorch.load_model(uri)
    features = torch.tensor(np.stack(feature_frame(test)["features"]), dtype=torch.float32)
    with torch.no_grad():
        np.testing.assert_allclose(module(features).double().numpy(), expected, rtol=1e-5, atol=1e-6)

    version = mlflow.register_model(uri, "spark-hvd-blobs")
    registered = mlflow.pyfunc.load_model(f"models:/spark-hvd-blobs/{version.version}")
    np.testing.assert_allclose(np.stack(registered.predict(feature_frame(test))["label__output"]), expected,
                               rtol=1e-6)


def test_failed_fit_ends_its_run_failed_with_the_epochs_it_finished(local_spark, tracking, tmp_path) -> None:
    from spark_hvd.errors import RunError

    df = blobs(local_spark, 256)
    # 4 steps of 32 rows an epoch per rank: rank 1's 9th batch is in epoch 2 (0-based), so epochs 0 and 1
    # finish and their metrics reach the driver long before the failure does.
    failing = FailOnce(str(tmp_path / "failed-once"), rank=1, after_calls=8 * 32)
    with pytest.raises(RunError) as failure:
        with mlflow.start_run() as run:
            make_estimator(tmp_path, epochs=4, transformation_fn=failing).fit(df)
    assert failure.value.rank == 1, str(failure.value)  # the rank whose transformation_fn raised
    finished = tracking.get_run(run.info.run_id)
    assert finished.info.status == "FAILED"
    assert finished.data.tags["spark_hvd.error"].startswith(f"RunError: {str(failure.value)[:200]}")
    steps = [m.step for m in tracking.get_metric_history(run.info.run_id, "loss")]
    assert steps[:1] == [0] and set(steps) <= {0, 1}, steps
    assert not [m for m in tracking.search_logged_models([run.info.experiment_id])
                if m.source_run_id == run.info.run_id]
