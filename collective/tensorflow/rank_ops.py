"""Horovod's ``rank_op``, ``size_op``, ``local_rank_op`` and ``local_size_op``: the job's shape as int32
scalar tensors, read when the op runs rather than when a graph is built."""

from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from collective.process_sets import ranks_of_set_id
from collective.runtime import local_rank, local_size, rank
from collective.tensorflow.graph.bridge import not_converted, run


def _read_at_run_time(read: Callable[[], int], name: str | None) -> tf.Tensor:
    with tf.name_scope(name or read.__name__):
        (value,) = run(lambda: [np.asarray(read(), np.int32)], [], [tf.int32], [[]])
    return value


@not_converted
def rank_op(name: str | None = None) -> tf.Tensor:
    """This process's rank, as an int32 scalar tensor."""
    return _read_at_run_time(rank, name)


@not_converted
def local_rank_op(name: str | None = None) -> tf.Tensor:
    """This process's rank on its host, as an int32 scalar tensor."""
    return _read_at_run_time(local_rank, name)


@not_converted
def size_op(process_set_id: int = 0, name: str | None = None) -> tf.Tensor:
    """The number of processes in process set ``process_set_id`` (0, the default: all of them), as an
    int32 scalar tensor. An unknown id is a ValueError when the op runs."""
    def set_size() -> int:
        return len(ranks_of_set_id(process_set_id))
    return _read_at_run_time(set_size, name or "size_op")


@not_converted
def process_set_included_op(process_set_id: int = 0, name: str | None = None) -> tf.Tensor:
    """1 if this process belongs to process set ``process_set_id``, else 0, as an int32 scalar tensor,
    as Horovod's. An unknown id is a ValueError when the op runs."""
    def included() -> int:
        return int(rank() in ranks_of_set_id(process_set_id))
    return _read_at_run_time(included, name or "process_set_included_op")


@not_converted
def local_size_op(name: str | None = None) -> tf.Tensor:
    """The number of processes on this host, as an int32 scalar tensor."""
    return _read_at_run_time(local_size, name)
