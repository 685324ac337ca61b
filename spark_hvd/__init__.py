"""spark_hvd: distributed training on Apache Spark, with collective (a Horovod successor) underneath.

    import spark_hvd, collective

    def train():
        return collective.allreduce(np.ones(3) * collective.rank(), op=collective.Sum)

    results = spark_hvd.run(train, num_proc=2)   # [rank 0's result, rank 1's result]
"""

from spark_hvd.errors import (
    DynamicAllocationError,
    LaunchError,
    NotEnoughSlotsError,
    RankFailure,
    RunError,
    SparkJobError,
    StartTimeoutError,
)
from spark_hvd.rank_context import RankContext, rank_context
from spark_hvd.rank_events import emit_event
from spark_hvd.runner import run

__all__ = [
    "DynamicAllocationError", "LaunchError", "NotEnoughSlotsError", "RankContext", "RankFailure",
    "RunError", "SparkJobError", "StartTimeoutError", "emit_event", "rank_context", "run",
]
