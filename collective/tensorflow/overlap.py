"""A step's gradient allreduce split into ops that overlap backward.

The gradients go to the engine in buckets of about ``BUCKET_BYTES``, taken in the reverse of the
variables' order, which is the order backward produces them in a layered model. Each bucket is
submitted by its own py_function op, which copies the bucket into the engine's buffers, submits it and
returns a ticket at once; one last op waits for every ticket and returns the reduced tensors. Inside a
tf.function a submit op depends only on its bucket's gradients (and, through TensorFlow's automatic
control dependencies between stateful ops, on the submit traced before it), so the engine thread
reduces the last layers' gradients while TensorFlow still computes the first layers'. Only the bucket
finished last is waited for after backward. Eagerly, the ops simply run one after another.

Buckets rather than one op per gradient: each op costs some tens of microseconds of Python, which a
model with hundreds of variables would pay hundreds of times a step.
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from collective.process_sets import ProcessSet
from collective.reduce_ops import ReduceOp
from collective.tensorflow import engine_calls
from collective.tensorflow.bridge import run

# Large enough that a model pays a few bridge crossings a step, small enough that the buckets of the
# last layers leave early; the MLP of bench/keras_step.py (10.5 MB) goes in three.
BUCKET_BYTES = 2 << 20

# Submitted buckets, by ticket, until the wait op collects them. A step that fails between a submit and
# its wait leaves its entry here, which keeps the arrays alive while the engine may still use them.
_in_flight: dict[int, engine_calls.InFlight] = {}
_tickets = itertools.count(1)


def _nbytes(tensor: tf.Tensor) -> int:
    """The tensor's size, or BUCKET_BYTES (a bucket of its own) when its shape is not fully known."""
    elements = tensor.shape.num_elements()
    return BUCKET_BYTES if elements is None else elements * tensor.dtype.size


def buckets(tensors: Sequence[tf.Tensor]) -> list[list[int]]:
    """Indices of ``tensors`` grouped into buckets, last tensor first; a bucket closes once it holds
    BUCKET_BYTES."""
    out: list[list[int]] = []
    current: list[int] = []
    held = 0
    for index in reversed(range(len(tensors))):
        current.append(index)
        held += _nbytes(tensors[index])
        if held >= BUCKET_BYTES:
            out.append(current)
            current, held = [], 0
    if current:
        out.append(current)
    return out


def allreduce_overlapped(tensors: Sequence[tf.Tensor], names: Sequence[str], op: ReduceOp, prescale: float,
                         postscale: float, process_set: ProcessSet) -> list[tf.Tensor]:
    """Every tensor reduced across the set's ranks, submitted bucket by bucket (see the module)."""
    plan = buckets(tensors)
    tickets = [_submit_op([tensors[i] for i in bucket], [names[i] for i in bucket], op, prescale, postscale,
                          process_set) for bucket in plan]
    order = [i for bucket in plan for i in bucket]
    reduced = run(_wait, tickets, [tensors[i].dtype for i in order], [tensors[i].shape for i in order])
    out: list[Any] = [None] * len(tensors)
    for index, tensor in zip(order, reduced):
        out[index] = tensor
    return out


def _submit_op(tensors: list[tf.Tensor], names: list[str], op: ReduceOp, prescale: float, postscale: float,
               process_set: ProcessSet) -> tf.Tensor:
    def submit(*arrays: np.ndarray) -> list[np.ndarray]:
        ticket = next(_tickets)
        _in_flight[ticket] = engine_calls.start_allreduce(arrays, names, op, prescale, postscale,
                                                          process_set=process_set)
        return [np.array(ticket, np.int64)]

    (ticket,) = run(submit, tensors, [tf.int64], [tf.TensorShape([])])
    return ticket


def _wait(*tickets: np.ndarray) -> list[np.ndarray]:
    """Every bucket's reduced arrays, in bucket order. Waits for all of them before raising the first
    error, since until then the engine may still write into the arrays."""
    pending = [_in_flight.pop(int(ticket)) for ticket in tickets]
    error: Exception | None = None
    for in_flight in pending:
        try:
            in_flight.wait()
        except Exception as exc:  # noqa: BLE001 - re-raised once nothing is in flight
            error = error or exc
    if error is not None:
        raise error
    return [array for in_flight in pending for array in in_flight.arrays]
