"""Helpers that make every rank start from the same place: variables and Python objects."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import cloudpickle
import numpy as np
import tensorflow as tf

from collective.process_sets import ProcessSet, global_process_set
from collective.runtime import rank
from collective.tensorflow.graph import engine_calls
from collective.tensorflow.graph.bridge import not_converted, op_name
from collective.tensorflow.ops import check_root, broadcast_group


def _assign_broadcast(variables: list[Any], root_rank: int, base: str,
                      process_set: ProcessSet = global_process_set) -> list[Any]:
    """Assigns ``root_rank``'s value to every variable in one engine round trip; returns the assign ops."""
    names = [f"{base}.{i}" for i in range(len(variables))]
    values = broadcast_group([tf.convert_to_tensor(v) for v in variables], root_rank, names, process_set)
    return [variable.assign(value) for variable, value in zip(variables, values)]


@not_converted
def broadcast_variables(variables: Iterable[tf.Variable], root_rank: int,
                        process_set: ProcessSet = global_process_set) -> tf.Operation | None:
    """Assigns ``root_rank``'s value to every variable (tf.Variable or Keras) on every rank, in one engine
    round trip.

    Works eagerly, inside ``tf.function`` and in a TF1-style graph, where it returns the op that a
    ``Session`` runs (None elsewhere). Variables are matched by position, so every rank must pass the
    same list (the same model); a shape or dtype disagreement is a MismatchError.
    """
    variables = list(variables)
    if not variables:
        return None
    assigns = _assign_broadcast(variables, root_rank, op_name("broadcast_variables", None) or "broadcast_variables",
                                process_set)
    # Inside tf.function automatic control dependencies run the assigns (and a function may not return
    # an Operation); a TF1 graph needs the op.
    return None if tf.executing_eagerly() or tf.inside_function() else tf.group(*assigns)


@not_converted
def broadcast_(variables: Iterable[tf.Variable], root_rank: int, name: str | None = None,
               process_set: ProcessSet = global_process_set) -> list[tf.Tensor]:
    """Horovod's in-place broadcast: every variable takes ``root_rank``'s value; returns their new values."""
    variables = list(variables)
    if not variables:
        return []
    assigns = _assign_broadcast(variables, root_rank, op_name("broadcast_", name) or "broadcast_", process_set)
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


def broadcast_object(obj: Any, root_rank: int = 0, session: Any = None, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """Returns ``root_rank``'s ``obj`` (anything cloudpickle can serialise) on every rank of ``process_set``
    (``root_rank`` a global rank, as in ``broadcast``). Runs at once, so ``session`` (Horovod's, for TF1
    graphs) is accepted and not needed."""
    is_root = rank() == root_rank
    payload = np.frombuffer(cloudpickle.dumps(obj), dtype=np.uint8) if is_root else np.zeros(0, np.uint8)
    _, set_root = check_root(root_rank, name, process_set)
    (length,) = engine_calls.broadcast([np.array([payload.size], np.int64)],
                                       [_sub_name(name, "size", "broadcast_object")], set_root, process_set)
    if not is_root:
        payload = np.zeros(int(length[0]), np.uint8)
    (data,) = engine_calls.broadcast([payload], [_sub_name(name, "data", "broadcast_object")], set_root, process_set)
    return obj if is_root else cloudpickle.loads(data.tobytes())


def broadcast_object_fn(root_rank: int = 0, session: Any = None, name: str | None = None,
                        process_set: ProcessSet = global_process_set) -> Callable[[Any], Any]:
    """Horovod's builder for TF1 graphs: a function that broadcasts an object from ``root_rank``. Objects
    cross the engine directly here, graph or not, so it is ``broadcast_object`` with its arguments bound."""
    def broadcast_it(obj: Any) -> Any:
        return broadcast_object(obj, root_rank, session, name, process_set)
    return broadcast_it


def allgather_object(obj: Any, session: Any = None, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> list[Any]:
    """Returns the list of every ``process_set`` rank's ``obj``, in rank order. Runs at once (``session``
    accepted as Horovod's, not needed)."""
    payload = np.frombuffer(cloudpickle.dumps(obj), dtype=np.uint8)
    (lengths,) = engine_calls.allgather([np.array([payload.size], np.int64)],
                                        [_sub_name(name, "sizes", "allgather_object")], process_set)
    (data,) = engine_calls.allgather([payload], [_sub_name(name, "data", "allgather_object")], process_set)
    bounds = np.cumsum(lengths)[:-1]
    return [cloudpickle.loads(part.tobytes()) for part in np.split(data, bounds)]
