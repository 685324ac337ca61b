"""collective: Horovod-style collectives over a native ring (TCP between hosts, shared memory within one).

    import collective as hvd
    hvd.init()
    total = hvd.allreduce(np.ones(4), op=hvd.Sum)
"""

from collective.api.names import *  # noqa: F401,F403  (errors, reduce ops, process sets, topology, build queries)
from collective.api.names import __all__ as _shared_names
from collective.config import Config
from collective.errors import AuthenticationError
from collective.joining import init
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
from collective.runtime import shutdown, uses_shared_memory

__all__ = [
    "AuthenticationError", "Config", "allgather", "allreduce", "allreduce_", "alltoall", "barrier", "broadcast",
    "broadcast_", "grouped_allgather", "grouped_reducescatter", "init", "reducescatter", "shutdown",
    "uses_shared_memory", *_shared_names,
]
