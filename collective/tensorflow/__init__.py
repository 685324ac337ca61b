"""Horovod's TensorFlow 2 API on the collective engine: port a script with

    import collective.tensorflow as hvd   # was: import horovod.tensorflow as hvd

and run it with ``python -m collective.run -np 2 train.py``. Ops work eagerly and inside
``tf.function``.

The bridge. Tensors reach the engine as numpy arrays viewed through DLPack (no copy either way):
directly when eager, and inside ``tf.function`` from a ``tf.py_function`` op, which TensorFlow runs
in traced order (see ``collective.tensorflow.bridge``). It needs no TensorFlow headers and no custom
kernels, so one build serves every TensorFlow version. Its cost: the one copy an out-of-place
allreduce or broadcast needs anyway, plus some tens of microseconds of Python per call
(bench/RESULTS.md has the figures against collective.torch). Gradient reduction sends a step's
gradients in a few buckets that overlap backward (``collective.tensorflow.overlap``), so that cost is
paid a few times a step, not once per gradient. CPU only; not inside XLA.
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
from collective.timeline import start_timeline, stop_timeline
from collective.tensorflow.optimizer import DistributedOptimizer
from collective.tensorflow.rank_ops import local_rank_op, local_size_op, process_set_included_op, rank_op, size_op
from collective.tensorflow.sync_batch_norm import SyncBatchNormalization
from collective.tensorflow.session_hooks import BroadcastGlobalVariablesHook
from collective.tensorflow import util  # noqa: E402  (hvd.util, as Horovod's package has it)
from collective.tensorflow.util import _executing_eagerly  # noqa: F401  (Horovod exposes it on the package)

# Scripts that catch Horovod's error type keep working.
HorovodInternalError = CollectiveError

from collective.tensorflow import elastic  # noqa: E402  (hvd.elastic, which builds on the names above)
from collective.elastic.errors import HostsUpdatedInterrupt  # noqa: E402

__all__ = [
    "Adasum", "Average", "BroadcastGlobalVariablesHook", "CollectiveError", "CollectiveTimeoutError", "Compression", "DistributedGradientTape",
    "DistributedOptimizer",
    "HorovodInternalError", "HostsUpdatedInterrupt", "InvalidArgumentError", "Max", "Min", "MismatchError", "NotInitializedError",
    "PartialDistributedGradientTape", "PeerFailureError", "ProcessSet", "Product", "ReduceOp", "Sum",
    "SyncBatchNormalization", "add_process_set", "allgather", "allgather_object", "allreduce", "alltoall",
    "barrier", "broadcast", "broadcast_", "broadcast_global_variables", "broadcast_object", "broadcast_object_fn", "broadcast_variables",
    "cross_rank", "cross_size", "global_process_set", "grouped_allgather", "grouped_allreduce",
    "grouped_reducescatter", "init", "is_initialized", "join", "local_rank", "local_rank_op", "local_size",
    "local_size_op", "process_set_included_op", "rank", "rank_op", "reducescatter", "remove_process_set", "shutdown", "size", "size_op",
    "start_timeline", "stop_timeline",
]

# Horovod's build and availability queries, answered for this install and run.
from collective.api.capabilities import *  # noqa: E402,F401,F403  (the names in its __all__)
from collective.api.capabilities import __all__ as _capability_names  # noqa: E402

__all__ += _capability_names

from collective.tensorflow import mpi_ops  # noqa: E402,F401  (hvd.mpi_ops, which re-exports the names above)
