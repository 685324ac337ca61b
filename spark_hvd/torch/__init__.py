"""Torch on Spark: ``TorchEstimator`` and ``TorchModel`` (mirrors ``horovod.spark.torch``)."""

from typing import TYPE_CHECKING

from spark_hvd.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from spark_hvd.torch.estimator import TorchEstimator
    from spark_hvd.torch.model import TorchModel

__all__ = ["TorchEstimator", "TorchModel"]
# The estimator and model import pyspark.ml; a rank imports this package's trainer without them.
__getattr__ = lazy_exports(__name__, {"TorchEstimator": "spark_hvd.torch.estimator",
                                        "TorchModel": "spark_hvd.torch.model"})
