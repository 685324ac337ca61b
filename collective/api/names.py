"""Rank: the names every Horovod-style API of this package exports alike (``collective``, ``collective.torch``,
``collective.tensorflow``): the errors, the reduce ops, process sets, the topology queries, the timeline and
Horovod's build queries. Each API adds its own ops, ``init`` and ``shutdown``."""

from collective.api.capabilities import *  # noqa: F401,F403  (the names in its __all__)
from collective.api.capabilities import __all__ as _capability_names
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
from collective.timeline import start_timeline, stop_timeline

__all__ = [
    "Adasum", "Average", "CollectiveError", "CollectiveTimeoutError", "InvalidArgumentError", "Max", "Min",
    "MismatchError", "NotInitializedError", "PeerFailureError", "ProcessSet", "Product", "ReduceOp", "Sum",
    "add_process_set", "cross_rank", "cross_size", "global_process_set", "is_initialized", "local_rank",
    "local_size", "rank", "remove_process_set", "size", "start_timeline", "stop_timeline", *_capability_names,
]
