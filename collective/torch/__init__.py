"""Horovod's PyTorch API on the collective engine: port a script with

    import collective.torch as hvd   # was: import horovod.torch as hvd

and run it with ``python -m collective.run -np 2 train.py`` (or under mpirun). CPU tensors go through the
background engine; CUDA tensors through NCCL (collective/torch/cuda_ops.py).
"""

from collective.errors import (
    CollectiveError,
    CollectiveTimeoutError,
    InvalidArgumentError,
    MismatchError,
    NotInitializedError,
    PeerFailureError,
)
from collective.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from collective.reduce_ops import Adasum, Average, Max, Min, Product, ReduceOp, Sum
from collective.runtime import cross_rank, cross_size, is_initialized, local_rank, local_size, rank, size
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
from collective.timeline import start_timeline, stop_timeline

# Scripts that catch Horovod's error type keep working.
HorovodInternalError = CollectiveError

from collective.torch import elastic  # noqa: E402  (hvd.elastic, which builds on the names above)
from collective.elastic.errors import HostsUpdatedInterrupt  # noqa: E402

__all__ = [
    "Adasum", "Average", "CollectiveError", "CollectiveTimeoutError", "Compression", "DistributedOptimizer",
    "HorovodInternalError", "HostsUpdatedInterrupt", "InvalidArgumentError", "Max", "Min", "MismatchError", "NotInitializedError",
    "PeerFailureError", "ProcessSet", "Product", "ReduceOp", "Sum", "SyncBatchNorm", "add_process_set", "allgather", "allgather_async",
    "allgather_object", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "alltoall",
    "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters", "cross_rank", "cross_size",
    "global_process_set", "grouped_allgather", "grouped_allgather_async", "grouped_allreduce", "grouped_allreduce_",
    "grouped_allreduce_async", "grouped_allreduce_async_", "grouped_reducescatter", "grouped_reducescatter_async",
    "init", "is_initialized", "join", "local_rank", "local_size", "poll", "rank", "reducescatter",
    "reducescatter_async", "remove_process_set", "shutdown", "size", "sparse_allreduce_async", "start_timeline", "stop_timeline",
    "synchronize",
]

# Horovod's build and availability queries, answered for this install and run.
from collective.api.capabilities import *  # noqa: E402,F401,F403  (the names in its __all__)
from collective.api.capabilities import __all__ as _capability_names  # noqa: E402

__all__ += _capability_names

from collective.torch import mpi_ops  # noqa: E402,F401  (hvd.mpi_ops, which re-exports the names above)
