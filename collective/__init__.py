"""collective: Horovod-style collectives over a native ring (TCP between hosts, shared memory within one).

    import collective as hvd
    hvd.init()
    total = hvd.allreduce(np.ones(4), op=hvd.Sum)
"""

from collective.config import Config
from collective.errors import (
    AuthenticationError,
    CollectiveError,
    CollectiveTimeoutError,
    InvalidArgumentError,
    MismatchError,
    NotInitializedError,
    PeerFailureError,
)
from collective.ops import (
    allgather,
    allreduce,
    allreduce_,
    alltoall,
    barrier,
    broadcast,
    broadcast_,
    grouped_allgather,
    grouped_reducescatter,
    reducescatter,
)
from collective.joining import init
from collective.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from collective.reduce_ops import Adasum, Average, Max, Min, Product, ReduceOp, Sum
from collective.runtime import (
    cross_rank,
    cross_size,
    is_initialized,
    local_rank,
    local_size,
    rank,
    shutdown,
    size,
    uses_shared_memory,
)
from collective.timeline import start_timeline, stop_timeline

__all__ = [
    "Adasum", "Average", "AuthenticationError", "CollectiveError", "CollectiveTimeoutError", "Config",
    "InvalidArgumentError", "Max", "Min", "MismatchError", "NotInitializedError", "PeerFailureError",
    "ProcessSet", "Product", "ReduceOp", "Sum", "add_process_set", "allgather", "allreduce", "allreduce_", "alltoall", "barrier",
    "broadcast", "broadcast_", "cross_rank", "cross_size", "global_process_set", "grouped_allgather", "grouped_reducescatter", "init",
    "is_initialized", "local_rank", "local_size", "rank", "reducescatter", "remove_process_set", "shutdown", "size", "start_timeline",
    "stop_timeline", "uses_shared_memory",
]

# Horovod's build and availability queries, answered for this install and run.
from collective.api.capabilities import *  # noqa: E402,F401,F403  (the names in its __all__)
from collective.api.capabilities import __all__ as _capability_names  # noqa: E402

__all__ += _capability_names
