"""``horovod.tensorflow.mpi_ops``: the ops module that scripts and tests import Horovod's names from
(``from horovod.tensorflow.mpi_ops import Sum``, ``hvd.mpi_ops._basics``); the package re-exports it."""

from collective.api.framework_names import *  # noqa: F401,F403  (errors, reduce ops, topology, ...)
from collective.api.framework_names import __all__ as _shared_names
from collective.process_sets import HorovodBasics
from collective.tensorflow.compression import Compression
from collective.tensorflow.functions import (
    allgather_object,
    broadcast_,
    broadcast_global_variables,
    broadcast_object,
    broadcast_object_fn,
    broadcast_variables,
)
from collective.tensorflow.gradient_tape import DistributedGradientTape, PartialDistributedGradientTape
from collective.tensorflow.lifecycle import init, shutdown
from collective.tensorflow.ops import (
    allgather,
    allreduce,
    alltoall,
    barrier,
    broadcast,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    join,
    reducescatter,
)
from collective.tensorflow.optimizer import DistributedOptimizer
from collective.tensorflow.rank_ops import local_rank_op, local_size_op, process_set_included_op, rank_op, size_op
from collective.tensorflow.sync_batch_norm import SyncBatchNormalization
from collective.tensorflow.session_hooks import BroadcastGlobalVariablesHook

__all__ = [
    "BroadcastGlobalVariablesHook", "Compression", "DistributedGradientTape", "DistributedOptimizer",
    "PartialDistributedGradientTape", "SyncBatchNormalization",
    "allgather", "allgather_object", "allreduce", "alltoall", "barrier", "broadcast", "broadcast_",
    "broadcast_global_variables", "broadcast_object", "broadcast_object_fn", "broadcast_variables",
    "grouped_allgather", "grouped_allreduce", "grouped_reducescatter", "init", "join", "local_rank_op",
    "local_size_op", "process_set_included_op", "rank_op", "reducescatter", "shutdown", "size_op", *_shared_names,
]

_basics = HorovodBasics()
