"""Lightning on Spark: ``TorchEstimator`` and ``TorchModel`` for LightningModules (mirrors
``horovod.spark.lightning``; needs ``pip install 'spark-hvd[lightning]'``)."""

from spark_hvd.lightning.estimator import TorchEstimator
from spark_hvd.lightning.model import TorchModel

__all__ = ["TorchEstimator", "TorchModel"]
