"""Keras on Spark: ``KerasEstimator`` and ``KerasModel`` (mirrors ``horovod.spark.keras``)."""

from typing import TYPE_CHECKING

from spark_hvd.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from spark_hvd.keras.estimator import KerasEstimator
    from spark_hvd.keras.model import KerasModel

__all__ = ["KerasEstimator", "KerasModel"]
# The estimator and model import pyspark.ml; a rank imports this package's trainer without them.
__getattr__ = lazy_exports(__name__, {"KerasEstimator": "spark_hvd.keras.estimator",
                                        "KerasModel": "spark_hvd.keras.model"})
