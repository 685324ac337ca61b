"""Collectives in a TF1 graph run by a ``tf.compat.v1.Session``: they wait without holding the Session's threads.

A Session runs a graph's ops on a few inter-op threads. A collective op that blocks until its peers
submit holds one of them, so ranks that started different independent collectives first can each end
up with every thread waiting for a collective the other ranks have no thread left to start (Horovod's
kernels are asynchronous and hold none). Each collective is therefore built as three ops:

1. a py_function that hands the inputs (numpy views of TensorFlow's memory, which keep it alive) to the
   op's queue and returns at once;
2. ``IteratorGetNext`` on a one-shot iterator over a generator that takes the inputs from the queue,
   runs the collective and yields its outcome. TensorFlow runs that kernel asynchronously, on a thread
   of its own, so the wait holds none of the Session's; ranks may start their collectives in any order,
   and the engine matches them by name;
3. the error check: bridge.py's ReadFile of the path the generator yields (which fails with
   FailedPreconditionError where Horovod raises that), and, only after other failures, a py_function
   that raises the tf.errors class Horovod raises there.

Every op depends on its inputs only, so a fetch runs the collectives it needs and no others: no earlier
collective (and none of its feeds) comes with it, and a failed one is not run again by later fetches.

A generator ends for good when it raises, so it never does: failures travel as data to the check.
The iterator's own dataset optimizations (prefetching) are off, so the generator runs only when the
step's get_next asks, after that step's inputs are queued. Inputs queued by a step that failed before
its get_next ran are dropped by the next one. One graph's collectives should not run in two Sessions at
the same time: each op has one queue.
"""

from __future__ import annotations

import itertools
import queue
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import tensorflow as tf

# Failures waiting for their step's check, by the number the generator yields in place of the empty string.
_failures: dict[int, BaseException] = {}
_failure_numbers = itertools.count(1)


def _serial() -> tf.data.Options:
    """Dataset options under which the generator runs only when get_next asks for an element."""
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    options.autotune.enabled = False
    return options


def collective_op(fn: Callable[..., Sequence[np.ndarray]], inputs: Sequence[tf.Tensor],
                  out_dtypes: Sequence[tf.DType], view: Callable[[tf.Tensor], np.ndarray], success_path: str,
                  failure_path: Callable[[BaseException], str],
                  failing_with: Callable[[tf.Tensor, Sequence[tf.Tensor]], list[tf.Tensor]]) -> list[tf.Tensor]:
    """``fn``'s results as tensors of a Session graph (see the module). bridge.py's check reads
    ``success_path``, or ``failure_path``'s answer for a failure, unless that raises what the op must
    raise instead; ``failing_with`` builds the check."""
    queued: "queue.SimpleQueue[list[np.ndarray]]" = queue.SimpleQueue()

    def enqueue(*tensors: tf.Tensor) -> np.ndarray:
        queued.put([view(t) for t in tensors])
        return np.int64(0)

    success = success_path.encode()

    def outcomes() -> Iterator[tuple[Any, ...]]:
        while True:
            arrays = queued.get()
            while True:  # the newest: older inputs belong to steps that failed before their get_next ran
                try:
                    arrays = queued.get_nowait()
                except queue.Empty:
                    break
            yield _outcome(fn, arrays, out_dtypes, success, failure_path)

    signature = (*[tf.TensorSpec(None, dtype) for dtype in out_dtypes], tf.TensorSpec([], tf.string),
                 tf.TensorSpec([], tf.string))
    dataset = tf.data.Dataset.from_generator(outcomes, output_signature=signature).with_options(_serial())
    iterator = tf.compat.v1.data.make_one_shot_iterator(dataset)
    started = tf.py_function(enqueue, list(inputs), tf.int64)
    with tf.control_dependencies([started]):
        *results, path, number = iterator.get_next()
    # The raising check runs only when the generator numbered a failure: a py_function per step costs more.
    path = tf.cond(tf.equal(number, ""), lambda: path,
                   lambda: tf.py_function(lambda n: failure_path(_failures.pop(int(n.numpy()))), [number], tf.string))
    return failing_with(path, results)


def _outcome(fn: Callable[..., Sequence[np.ndarray]], arrays: list[np.ndarray], out_dtypes: Sequence[tf.DType],
             success_path: bytes, failure_path: Callable[[BaseException], str]) -> tuple[Any, ...]:
    """``fn``'s results, the check's path and no number; after a failure, empty placeholders and either
    the failing path or the number under which the failure waits for the raising check."""
    try:
        return (*fn(*arrays), success_path, b"")
    except BaseException as exc:  # noqa: BLE001 - reported by the step's check; raising would end the iterator
        failure = exc
    placeholders = [np.zeros([0], dtype.as_numpy_dtype) for dtype in out_dtypes]
    try:
        return (*placeholders, failure_path(failure).encode(), b"")
    except BaseException:  # noqa: BLE001 - to be raised by the step's check, in the Session's thread
        number = next(_failure_numbers)
        _failures[number] = failure
        return (*placeholders, success_path, str(number).encode())
