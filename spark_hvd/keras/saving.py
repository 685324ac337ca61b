"""Keras models to and from bytes in the native ``.keras`` format.

Keras writes and reads that format only through a file name, so the bytes pass through a private
temporary directory; nothing is ever written in place where a reader could see half a file.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Iterable, Mapping

_FILE_NAME = "model.keras"


def model_to_bytes(model: Any) -> bytes:
    """The whole model: architecture, weights and, when compiled, the optimizer with its state."""
    with tempfile.TemporaryDirectory(prefix="spark-hvd-keras-") as directory:
        path = os.path.join(directory, _FILE_NAME)
        model.save(path)
        with open(path, "rb") as f:
            return f.read()


def model_from_bytes(blob: bytes, custom_objects: Mapping[str, Any] | None = None, compile: bool = True) -> Any:
    import keras

    with tempfile.TemporaryDirectory(prefix="spark-hvd-keras-") as directory:
        path = os.path.join(directory, _FILE_NAME)
        with open(path, "wb") as f:
            f.write(blob)
        return keras.saving.load_model(path, custom_objects=dict(custom_objects or {}) or None, compile=compile)


def loading_objects(custom_objects: Mapping[str, Any] | None, *compiled: Any) -> dict[str, Any]:
    """custom_objects plus the plain functions among the loss and metrics, by name: a ``.keras`` file
    names them in its compile config, and Keras finds by name only what it was told about."""
    objects = dict(custom_objects or {})
    for value in _flatten(compiled):
        name = getattr(value, "__name__", None)
        if callable(value) and name and not isinstance(value, type) and not hasattr(value, "get_config"):
            objects.setdefault(name, value)
    return objects


def _flatten(values: Iterable[Any]) -> Iterable[Any]:
    for value in values:
        if isinstance(value, (list, tuple)):
            yield from _flatten(value)
        elif isinstance(value, dict):
            yield from _flatten(value.values())
        elif value is not None:
            yield value


def restore_state(model: Any, optimizer: Any, blob: bytes, custom_objects: Mapping[str, Any] | None) -> None:
    """A saved ``.keras`` model's weights and optimizer variables (learning rate included) into ``model``,
    compiled with ``optimizer`` of the same kind."""
    saved = model_from_bytes(blob, custom_objects, compile=True)
    model.set_weights(saved.get_weights())
    if saved.optimizer is None:
        return
    optimizer.build(model.trainable_variables)
    source, target = list(saved.optimizer.variables), list(optimizer.variables)
    if len(source) != len(target):
        raise RuntimeError(f"the saved optimizer has {len(source)} variables, this run's has {len(target)}: "
                           "resume with the same optimizer as the run that wrote it")
    for variable, value in zip(target, source):
        variable.assign(value)
