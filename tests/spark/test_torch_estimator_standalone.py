"""TorchEstimator on a real standalone cluster (a master and two one-core workers on 127.0.0.1)."""

from __future__ import annotations

import numpy as np
import pytest

from estimator_data import blobs, predictions, with_ids
from test_torch_estimator import make_estimator

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


def test_fit_transform_save_load_on_a_standalone_cluster(standalone_spark, tmp_path) -> None:
    from spark_hvd import Store, TorchModel
    from spark_hvd.errors import InputError

    df = blobs(standalone_spark, 400)
    with pytest.raises(InputError, match="store is required on a cluster"):
        make_estimator(None, epochs=1).fit(df)
    model = make_estimator(Store.create(str(tmp_path / "store")), epochs=3, validation=0.25).fit(df)
    assert model.getEpochMetrics()[-1]["val_accuracy"] > 0.9
    test = with_ids(blobs(standalone_spark, 100, partitions=2))
    scores = predictions(model.transform(test))
    labels = np.array([r.label for r in test.orderBy("id").collect()])
    assert (scores.argmax(axis=1) == labels).mean() > 0.9
    model.save(str(tmp_path / "model"))
    np.testing.assert_array_equal(predictions(TorchModel.load(str(tmp_path / "model")).transform(test)), scores)
