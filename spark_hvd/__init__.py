"""spark_hvd: distributed training on Apache Spark, with collective (a Horovod successor) underneath.

    import spark_hvd, collective

    def train():
        return collective.allreduce(np.ones(3) * collective.rank(), op=collective.Sum)

    results = spark_hvd.run(train, num_proc=2)   # [rank 0's result, rank 1's result]
"""

from spark_hvd.errors import (
    CheckpointMismatchError,
    CommitTooLargeError,
    DynamicAllocationError,
    ElasticNotSupportedError,
    IgnoredArgumentWarning,
    LaunchError,
    NotEnoughSlotsError,
    RankFailure,
    ResetLimitError,
    RunError,
    RunIdReuseWarning,
    SparkJobError,
    StartTimeoutError,
)
from collective.elastic.errors import ElasticTimeoutError
from spark_hvd.launch.rank.rank_context import RankContext, rank_context
from spark_hvd.launch.rank.rank_events import emit_event
from spark_hvd.launch.driver.elastic_runner import run_elastic
from spark_hvd.launch.driver.runner import run
from spark_hvd.torch_distributor import TorchDistributor

# Estimators, models and the Store import heavy frameworks, so they load on first use.
_LAZY = {
    "Store": "spark_hvd.store",
    "HorovodEstimator": "spark_hvd.estimator.base",
    "HorovodModel": "spark_hvd.estimator.model_base",
    "TorchEstimator": "spark_hvd.torch.estimator",
    "TorchModel": "spark_hvd.torch.model",
    "KerasEstimator": "spark_hvd.keras.estimator",
    "KerasModel": "spark_hvd.keras.model",
}


# Horovod's subpackages under their own names, so `import horovod.spark` followed by `horovod.spark.run(...)`
# or `horovod.spark.common.store.Store(...)` ports as `import spark_hvd as horovod`: spark_hvd is its own
# `spark`.
_SUBPACKAGES = ("common", "torch", "keras", "lightning")


def __getattr__(name: str):  # noqa: ANN202 - module-level lazy attribute (PEP 562)
    import importlib
    import sys

    if name == "spark":
        return sys.modules[__name__]
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'spark_hvd' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [*_LAZY,
    "CheckpointMismatchError", "CommitTooLargeError", "DynamicAllocationError", "ElasticNotSupportedError",
    "ElasticTimeoutError", "IgnoredArgumentWarning",
    "LaunchError", "NotEnoughSlotsError", "RankContext", "RankFailure", "ResetLimitError", "RunError",
    "RunIdReuseWarning", "SparkJobError", "StartTimeoutError", "TorchDistributor", "emit_event", "rank_context",
    "run", "run_elastic",
]
