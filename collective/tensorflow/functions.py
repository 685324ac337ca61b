"""Helpers that make every rank start from the same place: variables and Python objects."""

from __future__ import annotations

from typing import Any, Iterable

import cloudpickle
import numpy as np
import tensorflow as tf

from collective.runtime import rank
from collective.tensorflow import engine_calls
from collective.tensorflow.bridge import not_converted, op_name
from collective.tensorflow.ops import broadcast_group


def _assign_broadcast(variables: list[Any], root_rank: int, base: str) -> list[Any]:
    """Assigns ``root_rank``'s value to every variable in one engine round trip; returns the assign ops."""
    names = [f"{base}.{i}" for i in range(len(variables))]
    values = broadcast_group([tf.convert_to_tensor(v) for v in variables], root_rank, names)
    return [variable.assign(value) for variable, value in zip(variables, values)]


@not_converted
def broadcast_variables(variables: Iterable[tf.Variable], root_rank: int) -> tf.Operation | None:
    """Assigns ``root_rank``'s value to every variable (tf.Variable or Keras) on every rank, in one engine
    round trip.

    Works eagerly, inside ``tf.function`` and in a TF1-style graph, where it returns the op that a
    ``Session`` runs (None elsewhere). Variables are matched by position, so every rank must pass the
    same list (the same model); a shape or dtype disagreement is a MismatchError.
    """
    variables = list(variables)
    if not variables:
        return None
    assigns = _assign_broadcast(variables, root_rank, op_name("broadcast_variables", None) or "broadcast_variables")
    # Inside tf.function automatic control dependencies run the assigns (and a function may not return
    # an Operation); a TF1 graph needs the op.
    return None if tf.executing_eagerly() or tf.inside_function() else tf.group(*assigns)


@not_converted
def broadcast_(variables: Iterable[tf.Variable], root_rank: int, name: str | None = None) -> list[tf.Tensor]:
    """Horovod's in-place broadcast: every variable takes ``root_rank``'s value; returns their new values."""
    variables = list(variables)
    if not variables:
        return []
    assigns = _assign_broadcast(variables, root_rank, op_name("broadcast_", name) or "broadcast_")
    with tf.control_dependencies(None if tf.executing_eagerly() else assigns):
        return [tf.convert_to_tensor(v.read_value() if hasattr(v, "read_value") else v) for v in variables]


def broadcast_global_variables(root_rank: int) -> tf.Operation:
    """Broadcasts a TF1-style graph's global variables from ``root_rank``; returns the op to run. Like
    Horovod's, it refuses eager execution: use ``broadcast_variables`` there."""
    if tf.executing_eagerly():
        raise RuntimeError("broadcast_global_variables() does not support eager execution; use "
                           "broadcast_variables(<model/optimizer variables>, root_rank) instead")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank) or tf.no_op()


def _sub_name(name: str | None, part: str, default: str) -> str:
    return f"{name}.{part}" if name else f"{default}.{part}"


def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None) -> Any:
    """Returns ``root_rank``'s ``obj`` (anything cloudpickle can serialise) on every rank. Eager only."""
    is_root = rank() == root_rank
    payload = np.frombuffer(cloudpickle.dumps(obj), dtype=np.uint8) if is_root else np.zeros(0, np.uint8)
    (length,) = engine_calls.broadcast([np.array([payload.size], np.int64)],
                                       [_sub_name(name, "size", "broadcast_object")], root_rank)
    if not is_root:
        payload = np.zeros(int(length[0]), np.uint8)
    (data,) = engine_calls.broadcast([payload], [_sub_name(name, "data", "broadcast_object")], root_rank)
    return obj if is_root else cloudpickle.loads(data.tobytes())


def allgather_object(obj: Any, name: str | None = None) -> list[Any]:
    """Returns the list of every rank's ``obj``, in rank order. Eager only."""
    payload = np.frombuffer(cloudpickle.dumps(obj), dtype=np.uint8)
    (lengths,) = engine_calls.allgather([np.array([payload.size], np.int64)],
                                        [_sub_name(name, "sizes", "allgather_object")])
    (data,) = engine_calls.allgather([payload], [_sub_name(name, "data", "allgather_object")])
    bounds = np.cumsum(lengths)[:-1]
    return [cloudpickle.loads(part.tobytes()) for part in np.split(data, bounds)]
