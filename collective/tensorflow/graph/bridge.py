"""How a collective on tf.Tensors reaches the engine: through numpy, eagerly or from inside a graph.

A tensor is viewed as a numpy array through DLPack (no copy), goes to ``engine_calls``, and the result
array becomes a tensor through DLPack again (no copy; bfloat16, which numpy's DLPack does not carry,
goes through ``.numpy()`` and ``tf.convert_to_tensor``). Eagerly that happens directly. Inside
``tf.function`` the same Python runs as a ``tf.py_function`` op, which hands it eager tensors, so the
DLPack path holds there too; ``tf.numpy_function`` was measured first and copies each tensor on the
way in and again on the way out (twice the time for a 1 MiB allreduce). A py_function op is stateful,
and TensorFlow's automatic control dependencies run stateful ops in the order they were traced, so
every rank submits its collectives in program order. A TF1 graph run by a Session has no such
dependencies, and a blocking op there holds one of the Session's few threads, so its collectives wait
elsewhere (session_ops.py). No TensorFlow header or custom kernel is involved; ops cannot be
XLA-compiled (a clear error says so).

Errors. Eagerly, an op raises the tf.errors class Horovod raises in its place, which is also the
collective's own exception (``collective.tensorflow.errors``). From a graph, TensorFlow rebuilds the
error from a status code, so there it arrives as the same tf.errors class (FailedPreconditionError
when ranks disagree, InvalidArgumentError for bad arguments, UnknownError when the job fails) whose
message holds the collective error's class name and text, but it is not the collective class.

Names. Ranks must agree on every collective's name. Eager calls without ``name=`` use the engine's
counter (Horovod's rule). Graph ops are named when traced, from the graph's name (the traced
function's Python name) and a counter per graph, so a function traced again (new input shapes, or a
rank that retraces for a partial last batch) reuses the same names instead of drifting apart. A
TF1-style ``tf.Graph`` (run in a ``tf.compat.v1.Session``) has no name; its ops are named ``graph``
and the graph's counter, so ranks that build the same graph agree.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.framework.func_graph import FuncGraph
from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext
from tensorflow.python.ops.control_flow_v2_func_graphs import ControlFlowFuncGraph

from collective._native import DType
from collective.dtypes import SUPPORTED
from collective.errors import CollectiveError
from collective.tensorflow.graph.engine_calls import TENSOR_ALIGNMENT
from collective.tensorflow.graph import session_ops
from collective.tensorflow.errors import as_tf_error, invalid_argument, tf_error_class

# TensorFlow names every native DType as the native table does.
SUPPORTED_DTYPES = frozenset(tf.as_dtype(d.name) for d in DType)

# Library functions called from a user's tf.function are kept out of AutoGraph's conversion: the
# Python that runs inside py_function at every step must stay plain Python.
not_converted = tf.autograph.experimental.do_not_convert

_graph_counters: "weakref.WeakKeyDictionary[Any, itertools.count]" = weakref.WeakKeyDictionary()
# How many collectives of each derived name (a gradient's) each graph has; see distinct_in_graph.
_graph_names: "weakref.WeakKeyDictionary[Any, dict[str, int]]" = weakref.WeakKeyDictionary()


def label(name: str | None) -> str:
    """How error messages refer to a tensor."""
    return repr(name) if name else "(unnamed)"


def as_tensor(value: Any, name: str | None) -> tf.Tensor:
    """``value`` as a dense tensor of a dtype the engine supports; raises naming the tensor otherwise."""
    if isinstance(value, tf.IndexedSlices):
        raise invalid_argument(f"tensor {label(name)} is an IndexedSlices; this op needs a dense tensor")
    tensor = tf.convert_to_tensor(value)
    if tensor.dtype not in SUPPORTED_DTYPES:
        raise invalid_argument(
            f"tensor {label(name)} has dtype {tensor.dtype.name}, which collectives do not support; "
            f"use one of {SUPPORTED}")
    return tensor


def op_name(kind: str, name: str | None) -> str | None:
    """The name a collective is submitted under: the caller's, or (in a graph) one fixed at trace time.

    None (eager, unnamed) lets the engine number it.
    """
    if name or tf.executing_eagerly():
        return name or None
    graph = _naming_graph()
    counter = _graph_counters.setdefault(graph, itertools.count())
    return f"{getattr(graph, 'name', 'graph')}.{kind}.{next(counter)}"


def distinct_in_graph(name: str) -> str:
    """``name``, or in a graph that has an op of that name already, ``name.1``, ``name.2``... The
    backward of one forward op may be built twice (two tf.gradients calls), and a Session may run both
    at once. Eagerly, ``name`` as it is."""
    if tf.executing_eagerly():
        return name
    built = _graph_names.setdefault(_naming_graph(), {})
    repeat = built.get(name, 0)
    built[name] = repeat + 1
    return f"{name}.{repeat}" if repeat else name


def _naming_graph() -> Any:
    """The graph whose names a collective built now shares. The branches of tf.cond and the bodies of
    tf.while_loop are graphs of their own, named with a process-wide counter: their function's instead."""
    graph = tf.compat.v1.get_default_graph()
    while isinstance(graph, ControlFlowFuncGraph):
        graph = graph.outer_graph
    return graph


def run(fn: Callable[..., Sequence[np.ndarray]], inputs: Sequence[tf.Tensor], out_dtypes: Sequence[tf.DType],
        out_shapes: Sequence[tf.TensorShape | list | None]) -> list[tf.Tensor]:
    """Runs ``fn`` (numpy arrays in, a sequence of numpy arrays out) on the tensors' values."""
    if tf.executing_eagerly():
        try:
            return _through_numpy(fn, inputs, out_dtypes)
        except CollectiveError as exc:
            raise as_tf_error(exc) from exc
    if GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        raise invalid_argument(
            "collectives cannot run inside an XLA-compiled function (jit_compile=True); Keras 3 turns XLA on by "
            "default when a GPU is present, so compile the model with jit_compile=False")
    if in_session_graph():
        outputs = session_ops.collective_op(fn, inputs, out_dtypes, _view, _NO_FAILURE, _failure_path_or_raise,
                                            _failing_with)
    else:
        *results, failure = tf.py_function(_reporting_errors(fn, out_dtypes), list(inputs), [*out_dtypes, tf.string])
        outputs = _failing_with(failure, results)
    for output, shape in zip(outputs, out_shapes):
        if shape is not None:
            output.set_shape(shape)
    return list(outputs)


def in_session_graph() -> bool:
    """Whether ops built now go into a TF1 graph run by a ``tf.compat.v1.Session`` (not eager, not a
    tf.function, which runs its stateful ops in the order they were traced)."""
    return not tf.executing_eagerly() and not isinstance(tf.compat.v1.get_default_graph(), FuncGraph)


# A graph op's Python exception reaches the caller as a tf.errors.OpError rebuilt from a status code
# that py_function derives from the exception's type: ValueError gives InvalidArgumentError, any
# other type UnknownError; the collective error's class name leads the message. No exception type
# gives FailedPreconditionError, which Horovod raises when ranks disagree, so those errors take
# another way out: the py_function returns placeholder outputs and a path that cannot be opened, and
# a ReadFile op fails on it. TensorFlow reports a file opened through a non-directory (ENOTDIR) as
# FailedPreconditionError and quotes the path, which carries the message. On success the path is
# /dev/null, an empty read. The read feeds a stateful Assert, which the outputs depend on: Grappler
# turns a stateless op whose outputs nobody reads into a NoOp, and it forwards identities, so no
# chain of identities keeps the read alive by itself.
_NO_FAILURE = "/dev/null"


@functools.lru_cache(maxsize=None)
def _no_failure_path() -> tf.Tensor:
    """The success path as one eager tensor, made once and returned by every op rather than per call."""
    return tf.constant(_NO_FAILURE)


def _failing_with(failure: tf.Tensor, outputs: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    # Both ops have CPU kernels only: pinned there, a Session without soft placement accepts them under a
    # GPU device scope too.
    with tf.device("/device:CPU:0"):
        kept_alive = tf.raw_ops.Assert(condition=tf.constant(True), data=[tf.io.read_file(failure)])
    with tf.control_dependencies([kept_alive]):
        return [tf.identity(output) for output in outputs]


# Linux refuses a longer path with ENAMETOOLONG, which TensorFlow reports as InvalidArgumentError.
_PATH_MAX_BYTES = 4095
_CUT = " [...]"


def _failure_path(exc: CollectiveError) -> str:
    """A path whose opening fails with ENOTDIR and whose text, as TensorFlow's error quotes it, shows
    the collective error on a line of its own (its end cut off where the path would be too long)."""
    head = f"{_NO_FAILURE}/\n"
    text = f"{type(exc).__name__}: {exc}"
    room = _PATH_MAX_BYTES - len(head.encode()) - len("\n".encode())
    if len(text.encode()) > room:
        text = text.encode()[:room - len(_CUT)].decode(errors="ignore") + _CUT
    return f"{head}{text}\n"


def _reporting_errors(fn: Callable[..., Sequence[np.ndarray]],
                      out_dtypes: Sequence[tf.DType]) -> Callable[..., list[tf.Tensor]]:
    @not_converted
    def call(*tensors: tf.Tensor) -> list[tf.Tensor]:
        try:
            return [*_through_numpy(fn, tensors, out_dtypes), _no_failure_path()]
        except CollectiveError as exc:
            return [*[tf.zeros([0], dtype) for dtype in out_dtypes], tf.constant(_failure_path_or_raise(exc))]
    return call


def _failure_path_or_raise(failure: BaseException) -> str:
    """The failing path for an error Horovod raises as FailedPreconditionError. Any other error is raised
    here, as the Python exception py_function turns into the tf.errors class Horovod raises (ValueError:
    InvalidArgumentError; others: UnknownError)."""
    if not isinstance(failure, CollectiveError):
        raise failure
    tf_class = tf_error_class(failure)
    if tf_class is tf.errors.FailedPreconditionError:
        return _failure_path(failure)
    message = f"{type(failure).__name__}: {failure}"
    raise (ValueError(message) if tf_class is tf.errors.InvalidArgumentError else RuntimeError(message)) from failure


def _through_numpy(fn: Callable[..., Sequence[np.ndarray]], tensors: Sequence[tf.Tensor],
                   out_dtypes: Sequence[tf.DType]) -> list[tf.Tensor]:
    return [_wrap(r, d) for r, d in zip(fn(*[_view(t) for t in tensors]), out_dtypes)]


def _view(tensor: tf.Tensor) -> np.ndarray:
    """A read-only numpy view of an eager CPU tensor's memory."""
    return tensor.numpy() if tensor.dtype == tf.bfloat16 else np.from_dlpack(tensor)


def _wrap(array: np.ndarray, dtype: tf.DType) -> tf.Tensor:
    """A tensor over the array's memory (which it keeps alive), or a copy where DLPack cannot carry it
    or the memory is not aligned as TensorFlow's kernels require."""
    if dtype == tf.bfloat16 or not array.flags.c_contiguous or array.ctypes.data % TENSOR_ALIGNMENT:
        return tf.convert_to_tensor(array, dtype=dtype)
    return tf.experimental.dlpack.from_dlpack(array.__dlpack__())


def leading_unknown(shape: tf.TensorShape) -> tf.TensorShape:
    """The static shape of a result whose first dimension depends on other ranks."""
    return tf.TensorShape([None]).concatenate(shape[1:]) if shape.rank else tf.TensorShape(None)
