"""``hvd.elastic`` for TensorFlow, in Horovod's names: ``TensorFlowKerasState``, ``TensorFlowState``,
``ObjectState`` and the ``run`` decorator (the Keras callbacks are in ``collective.keras.elastic``)."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import tensorflow as tf

from collective import runtime
from collective.elastic import state as _state
from collective.elastic.errors import HostsUpdatedInterrupt, RoundSupersededError, is_peer_loss
from collective.errors import CollectiveTimeoutError, PeerFailureError
from collective.elastic.run import Lifecycle, elastic_run
from collective.elastic.state import State, StateHandler
from collective.tensorflow import lifecycle
from collective.tensorflow.functions import broadcast_object, broadcast_variables

# Inside a tf.function, the bridge re-raises a collective error as RuntimeError("<class name>: ..."), and
# TensorFlow rebuilds it as an OpError from its message alone (collective/tensorflow/graph/bridge.py).
_GRAPH_PEER_LOSS = tuple(f"RuntimeError: {cls.__name__}: "
                         for cls in (PeerFailureError, CollectiveTimeoutError, RoundSupersededError))


def _peer_loss(error: BaseException) -> bool:
    if is_peer_loss(error):
        return True
    return isinstance(error, tf.errors.OpError) and any(tag in (error.message or "") for tag in _GRAPH_PEER_LOSS)


run = elastic_run(Lifecycle(shutdown=lifecycle.shutdown, init=lifecycle.init, peer_loss=_peer_loss))


class ObjectState(_state.ObjectState):
    """Picklable attributes (``hvd.elastic.ObjectState(epoch=0, batch=0)``) committed, restored and synced."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(broadcast_object, runtime.rank, **kwargs)


class _VariablesHandler(StateHandler):
    """A list of variables (tf.Variable or Keras)."""

    def _variables(self) -> list[Any]:
        return list(self.value)

    def save(self) -> None:
        self._saved = [np.array(v.numpy(), copy=True) for v in self._variables()]

    def restore(self) -> None:
        variables = self._variables()
        if len(variables) != len(self._saved):
            raise RuntimeError(f"cannot restore {len(variables)} variables from a commit of {len(self._saved)}; "
                               "were variables created after the commit?")
        for variable, value in zip(variables, self._saved):
            variable.assign(value)

    def sync(self) -> None:
        broadcast_variables(self._variables(), root_rank=0)


class TensorFlowState(_state.HandlerState):
    """Horovod's ``TensorFlowState(variables=, **attrs)`` for TF2 eager code: the variables' values, and
    picklable attributes, committed together."""

    def __init__(self, variables: Iterable[Any] | None = None, **kwargs: Any) -> None:
        handlers = {"variables": _VariablesHandler(list(variables or []))}
        super().__init__(broadcast_object, runtime.rank, handlers, **kwargs)


class TensorFlowKerasState(_state.HandlerState):
    """Horovod's ``TensorFlowKerasState(model, optimizer=None, **attrs)``: the Keras model's weights, the
    optimizer's variables (its step count, slots and learning rate), and picklable attributes."""

    def __init__(self, model: Any, optimizer: Any = None, backend: Any = None, **kwargs: Any) -> None:
        if model is None or not hasattr(model, "variables"):
            raise TypeError(f"TensorFlowKerasState(model=) takes a Keras model, got {type(model).__name__}")
        optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        handlers: dict[str, StateHandler] = {"model": _KerasVariablesHandler(model)}
        if optimizer is not None:
            handlers["optimizer"] = _KerasVariablesHandler(optimizer)
        super().__init__(broadcast_object, runtime.rank, handlers, **kwargs)


class _KerasVariablesHandler(_VariablesHandler):
    """A Keras model's or optimizer's variables, read at each save (an optimizer adds its slots on its first
    step)."""

    def _variables(self) -> list[Any]:
        return list(self.value.variables)


__all__ = ["HostsUpdatedInterrupt", "ObjectState", "State", "TensorFlowKerasState", "TensorFlowState", "run"]
