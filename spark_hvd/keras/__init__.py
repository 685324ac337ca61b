"""Keras on Spark: ``KerasEstimator`` and ``KerasModel`` (mirrors ``horovod.spark.keras``)."""

from spark_hvd.keras.estimator import KerasEstimator
from spark_hvd.keras.model import KerasModel

__all__ = ["KerasEstimator", "KerasModel"]
