"""Lightning on Spark: ``TorchEstimator`` and ``TorchModel`` for LightningModules (mirrors
``horovod.spark.lightning``; needs ``pip install 'spark-hvd[lightning]'``)."""

from typing import TYPE_CHECKING

from spark_hvd.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from spark_hvd.lightning.estimator import TorchEstimator
    from spark_hvd.lightning.model import TorchModel

__all__ = ["TorchEstimator", "TorchModel"]
# The estimator and model import pyspark.ml; a rank imports this package's trainer without them.
__getattr__ = lazy_exports(__name__, {"TorchEstimator": "spark_hvd.lightning.estimator",
                                        "TorchModel": "spark_hvd.lightning.model"})
