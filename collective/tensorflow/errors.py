"""The errors TensorFlow code sees: each collective error as the ``tf.errors`` class Horovod raises in
its place, still an instance of the collective error (so ``except hvd.MismatchError`` and
``except hvd.HorovodInternalError`` keep working), with the original as its ``__cause__``.

Horovod's TensorFlow ops fail with FailedPreconditionError when ranks disagree (shapes, dtypes, root
ranks) or before ``init()``, with InvalidArgumentError for bad arguments (alltoall splits), and with
UnknownError when the job itself fails. This module is the one place that mapping lives; the bridge
applies it to everything an op raises. Each combined class is importable from here under the
collective class's name, so the errors pickle.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from collective import errors as collective_errors

# Most specific first: a class is mapped by the first entry it is a subclass of.
_TF_CLASS: list[tuple[type[BaseException], type[tf.errors.OpError]]] = [
    (collective_errors.MismatchError, tf.errors.FailedPreconditionError),
    (collective_errors.NotInitializedError, tf.errors.FailedPreconditionError),
    (collective_errors.InvalidArgumentError, tf.errors.InvalidArgumentError),
    (collective_errors.CollectiveError, tf.errors.UnknownError),
]
_dual_classes: dict[type[BaseException], type[BaseException]] = {}


def tf_error_class(error: collective_errors.CollectiveError) -> type[tf.errors.OpError]:
    """The tf.errors class Horovod raises where ``error`` is raised."""
    return _tf_class_for(type(error))


def _tf_class_for(cls: type[BaseException]) -> type[tf.errors.OpError]:
    return next(t for ours, t in _TF_CLASS if issubclass(cls, ours))


def _dual_class(cls: type[BaseException]) -> type[BaseException]:
    """A class that is both ``cls`` and the tf.errors class it maps to, named as ``cls``."""
    if cls not in _dual_classes:
        tf_class = _tf_class_for(cls)
        dual = type(cls.__name__, (tf_class, cls), {"__module__": __name__})
        globals().setdefault(cls.__name__, dual)  # where pickle looks it up
        _dual_classes[cls] = dual
    return _dual_classes[cls]


for _name in collective_errors.__all__:
    _class = getattr(collective_errors, _name)
    if issubclass(_class, collective_errors.CollectiveError):
        _dual_class(_class)


def as_tf_error(error: collective_errors.CollectiveError) -> BaseException:
    """``error`` as TensorFlow code expects it; already-converted errors come back as they are."""
    if isinstance(error, tf.errors.OpError):
        return error
    converted = _dual_class(type(error))(None, None, str(error))
    # Attributes the native error carries (the blamed rank...) stay readable on the new one.
    for key, value in getattr(error, "__dict__", {}).items():
        converted.__dict__.setdefault(key, value)
    converted.__cause__ = error
    return converted


def invalid_argument(message: str) -> Any:
    """The error for bad input found while building an op: a tf.errors.InvalidArgumentError that is
    also the collective InvalidArgumentError, marked so that AutoGraph lets it reach the caller as it
    is instead of rewrapping it as a StagingError."""
    error = as_tf_error(collective_errors.InvalidArgumentError(message))
    error.ag_pass_through = True
    return error


def not_implemented(message: str) -> NotImplementedError:
    """What Horovod leaves unimplemented raises NotImplementedError, as there, past AutoGraph too."""
    error = NotImplementedError(message)
    error.ag_pass_through = True  # type: ignore[attr-defined]
    return error
