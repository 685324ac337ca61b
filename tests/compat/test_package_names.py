"""Horovod's module paths resolve from a bare package import too, as in `import horovod.spark` followed by
`horovod.spark.run(...)`, which ports as `import spark_hvd as horovod` (an import line alone)."""

from __future__ import annotations

import pytest


def test_spark_hvd_stands_for_horovod_dot_spark() -> None:
    import spark_hvd as horovod

    assert horovod.spark is horovod
    assert horovod.spark.run is horovod.run and horovod.spark.run_elastic is horovod.run_elastic
    from spark_hvd.common import backend, store, util

    assert horovod.spark.common.store is store and horovod.spark.common.backend is backend
    assert horovod.spark.common.util.prepare_data is util.prepare_data
    assert horovod.spark.torch.TorchEstimator is horovod.TorchEstimator


def test_unknown_names_still_fail_clearly() -> None:
    import spark_hvd

    with pytest.raises(AttributeError, match="no attribute 'mxnet'"):
        spark_hvd.mxnet  # noqa: B018
    with pytest.raises(AttributeError, match="spark_hvd.common' has no attribute 'estimator'"):
        spark_hvd.common.estimator  # noqa: B018
