"""Lightning on Spark: ``TorchEstimator`` and ``TorchModel`` for LightningModules (mirrors
``horovod.spark.lightning``; needs ``pip install 'spark-hvd[lightning]'``)."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_hvd.lightning.estimator import TorchEstimator
    from spark_hvd.lightning.model import TorchModel

# The estimator and model import pyspark.ml; a rank imports this package's trainer without them.
_LAZY = {"TorchEstimator": "spark_hvd.lightning.estimator", "TorchModel": "spark_hvd.lightning.model"}

__all__ = ["TorchEstimator", "TorchModel"]


def __getattr__(name: str) -> Any:
    import importlib

    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
