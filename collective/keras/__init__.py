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
from collective.api.names import *  # noqa: F401,F403  (errors, reduce ops, process sets, topology, build queries)
from collective.api.names import __all__ as _shared_names
from collective.elastic.errors import HostsUpdatedInterrupt
from collective.tensorflow import (
    Compression,
    HorovodInternalError,
    SyncBatchNormalization,
    allgather_object,
    alltoall,
    barrier,
    broadcast_global_variables,
    broadcast_object,
    broadcast_variables,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    init,
    join,
    shutdown,
)

from collective.keras import elastic  # noqa: E402  (hvd.elastic, which builds on the names above)

__all__ = [
    "BestModelCheckpoint", "BroadcastGlobalVariablesCallback", "Compression", "DistributedOptimizer",
    "HorovodInternalError", "HostsUpdatedInterrupt", "LearningRateScheduleCallback", "LearningRateWarmupCallback",
    "MetricAverageCallback", "PartialDistributedOptimizer", "SyncBatchNormalization", "allgather",
    "allgather_object", "allreduce", "alltoall", "barrier", "broadcast", "broadcast_global_variables",
    "broadcast_object", "broadcast_variables", "callbacks", "grouped_allgather", "grouped_allreduce",
    "grouped_reducescatter", "init", "join", "load_model", "reducescatter", "shutdown", *_shared_names,
]
