"""Keras on Spark: ``KerasEstimator`` and ``KerasModel`` (mirrors ``horovod.spark.keras``)."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_hvd.keras.estimator import KerasEstimator
    from spark_hvd.keras.model import KerasModel

# The estimator and model import pyspark.ml; a rank imports this package's trainer without them.
_LAZY = {"KerasEstimator": "spark_hvd.keras.estimator", "KerasModel": "spark_hvd.keras.model"}

__all__ = ["KerasEstimator", "KerasModel"]


def __getattr__(name: str) -> Any:
    import importlib

    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
