"""``horovod.torch.mpi_ops``, the module of Horovod's ops that some scripts and tests import names from
(``from horovod.torch.mpi_ops import Sum``, ``hvd.mpi_ops._basics``): the package's names, and ``_basics``.

The names are gathered here and the package re-exports them, as in Horovod, whose package imports its
ops from ``mpi_ops``."""

from collective.api.framework_names import *  # noqa: F401,F403  (errors, reduce ops, topology, ...)
from collective.api.framework_names import __all__ as _shared_names
from collective.process_sets import HorovodBasics
from collective.torch.autograd import (
    allgather,
    allreduce,
    alltoall,
    broadcast,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    reducescatter,
)
from collective.torch.compression import Compression
from collective.torch.functions import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from collective.torch.lifecycle import init, shutdown
from collective.torch.ops import (
    allgather_async,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall_async,
    barrier,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allgather_async,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter_async,
    join,
    poll,
    reducescatter_async,
    synchronize,
)
from collective.torch.optimizer import DistributedOptimizer
from collective.torch.sparse import sparse_allreduce_async
from collective.torch.sync_batch_norm import SyncBatchNorm

__all__ = [
    "Compression", "DistributedOptimizer", "SyncBatchNorm",
    "allgather", "allgather_async", "allgather_object", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "alltoall", "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters",
    "grouped_allgather", "grouped_allgather_async", "grouped_allreduce", "grouped_allreduce_",
    "grouped_allreduce_async", "grouped_allreduce_async_", "grouped_reducescatter", "grouped_reducescatter_async",
    "init", "join", "poll", "reducescatter", "reducescatter_async", "shutdown", "sparse_allreduce_async",
    "synchronize", *_shared_names,
]

_basics = HorovodBasics()
