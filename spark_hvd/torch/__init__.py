"""Torch on Spark: ``TorchEstimator`` and ``TorchModel`` (mirrors ``horovod.spark.torch``)."""

from spark_hvd.torch.estimator import TorchEstimator
from spark_hvd.torch.model import TorchModel

__all__ = ["TorchEstimator", "TorchModel"]
