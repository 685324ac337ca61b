"""TorchEstimator(reader="petastorm") end to end on local[2], on the stack Petastorm needs."""

from __future__ import annotations

from typing import Iterator

import cloudpickle
import pytest

pytest.importorskip("petastorm")
torch = pytest.importorskip("torch")

import estimator_models  # noqa: E402  (tests/spark, put on sys.path by tests/data/conftest.py)
from estimator_data import blobs, in_two_partitions  # noqa: E402
from estimator_models import accuracy, class_loss, classifier  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::FutureWarning")]


@pytest.fixture(scope="module")
def models_shipped_by_value() -> Iterator[None]:
    """The ranks unpickle the test's model and metric without importing tests/spark."""
    if estimator_models.__name__ in cloudpickle.list_registry_pickle_by_value():
        yield
        return
    cloudpickle.register_pickle_by_value(estimator_models)
    yield
    cloudpickle.unregister_pickle_by_value(estimator_models)


def test_fit_with_the_petastorm_reader_on_uneven_partitions(local_spark, models_shipped_by_value, tmp_path):
    from spark_hvd import Store, TorchEstimator

    df = in_two_partitions(blobs(local_spark, 600), first_rows=540)          # 90% in one partition
    model = classifier(4, 3)
    estimator = TorchEstimator(
        num_proc=2, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.02),
        loss=class_loss, metrics=[accuracy], feature_cols=["features"], label_cols=["label"],
        validation="is_val", batch_size=32, epochs=3, reader="petastorm", verbose=0,
        store=Store.create(str(tmp_path / "store")))
    history = estimator.fit(df).getEpochMetrics()
    assert [h["epoch"] for h in history] == [0, 1, 2]
    assert history[-1]["loss"] < history[0]["loss"] and history[-1]["val_accuracy"] > 0.9
