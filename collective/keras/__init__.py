"""Horovod's Keras API for Keras 3 on the TensorFlow backend: port a script with

    import collective.keras as hvd   # was: import horovod.tensorflow.keras as hvd

    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size())), ...)
    model.fit(x, y, callbacks=[hvd.BroadcastGlobalVariablesCallback(0), hvd.MetricAverageCallback()])

Works with ``model.fit`` compiled (tf.function) and with ``run_eagerly=True``. ``allreduce``,
``allgather``, ``broadcast`` and ``reducescatter`` take Horovod Keras's signatures (``name`` second); the
other ops and helpers of ``collective.tensorflow`` are re-exported.
"""

from collective.keras import callbacks
from collective.keras.callbacks import (
    BestModelCheckpoint,
    BroadcastGlobalVariablesCallback,
    LearningRateScheduleCallback,
    LearningRateWarmupCallback,
    MetricAverageCallback,
)
from collective.keras.ops import allgather, allreduce, broadcast, reducescatter
from collective.keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer
from collective.keras.saving import load_model
from collective.tensorflow import (
    Adasum,
    Average,
    CollectiveError,
    CollectiveTimeoutError,
    Compression,
    HorovodInternalError,
    InvalidArgumentError,
    Max,
    Min,
    MismatchError,
    NotInitializedError,
    PeerFailureError,
    ProcessSet,
    Product,
    ReduceOp,
    Sum,
    SyncBatchNormalization,
    add_process_set,
    allgather_object,
    alltoall,
    barrier,
    broadcast_global_variables,
    broadcast_object,
    broadcast_variables,
    cross_rank,
    cross_size,
    global_process_set,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    init,
    is_initialized,
    join,
    local_rank,
    local_size,
    rank,
    remove_process_set,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
)

from collective.keras import elastic  # noqa: E402  (hvd.elastic, which builds on the names above)
from collective.elastic.errors import HostsUpdatedInterrupt  # noqa: E402

__all__ = [
    "Adasum", "Average", "BestModelCheckpoint", "BroadcastGlobalVariablesCallback", "CollectiveError", "CollectiveTimeoutError", "Compression",
    "DistributedOptimizer", "HorovodInternalError", "HostsUpdatedInterrupt", "InvalidArgumentError", "LearningRateScheduleCallback",
    "LearningRateWarmupCallback", "Max", "MetricAverageCallback", "Min", "MismatchError", "NotInitializedError",
    "PartialDistributedOptimizer", "PeerFailureError", "ProcessSet", "Product", "ReduceOp", "Sum", "SyncBatchNormalization",
    "add_process_set", "allgather", "allgather_object", "allreduce", "alltoall", "barrier", "broadcast", "broadcast_global_variables",
    "broadcast_object", "broadcast_variables", "callbacks", "cross_rank", "cross_size", "global_process_set", "grouped_allgather",
    "grouped_allreduce", "grouped_reducescatter", "init", "is_initialized", "join", "load_model", "local_rank",
    "local_size", "rank", "reducescatter", "remove_process_set", "shutdown", "size", "start_timeline", "stop_timeline",
]

# Horovod's build and availability queries, answered for this install and run.
from collective.api.capabilities import *  # noqa: E402,F401,F403  (the names in its __all__)
from collective.api.capabilities import __all__ as _capability_names  # noqa: E402

__all__ += _capability_names
