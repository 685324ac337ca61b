"""horovod.tensorflow.keras's collectives on tensor-compatible values, with its signatures (``name``
second, as Keras scripts pass it positionally); each returns a tensor."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from collective.reduce_ops import Average, ReduceOp
from collective.tensorflow import ops
from collective.tensorflow.compression import Compression, Compressor


def allreduce(value: Any, name: str | None = None, average: bool | None = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, op: ReduceOp | None = None,
              compression: type[Compressor] = Compression.none) -> tf.Tensor:
    """The reduction of ``value`` across ranks (default Average)."""
    return ops.allreduce(tf.convert_to_tensor(value), average=average, compression=compression, op=op,
                         prescale_factor=prescale_factor, postscale_factor=postscale_factor, name=name)


def allgather(value: Any, name: str | None = None) -> tf.Tensor:
    """Every rank's ``value`` concatenated along the first dimension, in rank order."""
    return ops.allgather(tf.convert_to_tensor(value), name=name)


def broadcast(value: Any, root_rank: int, name: str | None = None) -> tf.Tensor:
    """``root_rank``'s ``value`` on every rank."""
    return ops.broadcast(tf.convert_to_tensor(value), root_rank, name=name)


def reducescatter(value: Any, name: str | None = None, op: ReduceOp = Average) -> tf.Tensor:
    """This rank's rows of ``value`` reduced across ranks."""
    return ops.reducescatter(tf.convert_to_tensor(value), op=op, name=name)
