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


@not_converted
def broadcast_variables(variables: Iterable[tf.Variable], root_rank: int) -> None:
    """Assigns ``root_rank``'s value to every variable (tf.Variable or Keras) on every rank, in one engine
    round trip.

    Works eagerly and inside ``tf.function``. Variables are matched by position, so every rank must
    pass the same list (the same model); a shape or dtype disagreement is a MismatchError.
    """
    variables = list(variables)
    if not variables:
        return
    base = op_name("broadcast_variables", None) or "broadcast_variables"
    names = [f"{base}.{i}" for i in range(len(variables))]
    values = broadcast_group([tf.convert_to_tensor(v) for v in variables], root_rank, names)
    for variable, value in zip(variables, values):
        variable.assign(value)


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
