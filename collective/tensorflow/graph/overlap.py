"""A step's gradient allreduce split into ops that overlap backward.

The gradients go to the engine in buckets of about ``BUCKET_BYTES`` (``Config.gradient_bucket_bytes``;
by default only where the host has a core to spare: see bucket_bytes_for), taken in the reverse of the
variables' order, which is the order backward produces them in a layered model. Each bucket is
submitted by its own py_function op, which hands the engine the gradients' own memory (DLPack views,
whose reference keeps TensorFlow from freeing or reusing it) with an output buffer for each, and
returns a ticket at once; one last op submits the last bucket (the first layers' gradients, ready only
when backward ends), waits for every ticket and returns the reduced tensors. Inside a
tf.function a submit op depends only on its bucket's gradients (and, through TensorFlow's automatic
control dependencies between stateful ops, on the submit traced before it), so the engine thread
reduces the last layers' gradients while TensorFlow still computes the first layers'. Only the bucket
finished last is waited for after backward. Eagerly, the ops simply run one after another; in a TF1
graph run by a Session, one op submits every gradient and waits.

Buckets rather than one op per gradient: each op costs some tens of microseconds of Python, which a
model with hundreds of variables would pay hundreds of times a step.
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any, Callable, Sequence

import numpy as np
import tensorflow as tf

from collective.engine import wait_each
from collective.process_sets import ProcessSet
from collective.reduce_ops import ReduceOp
from collective.runtime import current, is_initialized
from collective.tensorflow.graph import engine_calls
from collective.tensorflow.graph.bridge import in_session_graph, run
from collective.api.wait_clock import WaitClock

# Large enough that a model pays a few bridge crossings a step, small enough that the buckets of the
# last layers leave early; the MLP of bench/keras_step.py (10.5 MB) goes in three.
BUCKET_BYTES = 2 << 20

# Submitted buckets, by ticket, until the wait op collects them: (the call site that submitted them,
# the requests). A step that fails between a submit and its wait leaves its entries here; the site's
# next step moves them to _abandoned, which keeps their arrays alive until the engine is done with them.
_in_flight: dict[int, tuple[int, engine_calls.InFlight]] = {}
_abandoned: list[engine_calls.InFlight] = []
# A Session runs the collectives of a TF1 graph's independent optimizers at the same time (session_ops.py):
# held while the two above are scanned.
_lock = threading.Lock()
_tickets = itertools.count(1)
# One id per traced (or eager) call of allreduce_overlapped: its ops run once per step, in order.
_sites = itertools.count(1)
# The arrays the reduced gradients are written into, by gradient name, reused from step to step. The engine
# reads each gradient where TensorFlow left it (an out-of-place allreduce), so no copy precedes it.
_buffers: dict[str, np.ndarray] = {}


def bucket_bytes_for(configured: int | None, cores: int, local_ranks: int) -> int:
    """The bucket size (0: one bucket after backward): ``configured`` (Config.gradient_bucket_bytes), or
    by default BUCKET_BYTES where the host has more cores than ranks, else 0. Overlap needs a core to
    run the engine on while backward computes; where every core computes, each extra bucket only adds
    a bridge crossing and a negotiation round to the step (bench/RESULTS.md: 0.6-1.0 ms a step on 2
    cores with 2 ranks)."""
    if configured is not None:
        return configured
    return BUCKET_BYTES if cores > local_ranks else 0


def _bucket_bytes() -> int:
    """bucket_bytes_for this job and host (BUCKET_BYTES before init, when the host is not known yet)."""
    if not is_initialized():
        return BUCKET_BYTES
    job = current()
    return bucket_bytes_for(job.config.gradient_bucket_bytes, len(os.sched_getaffinity(0)), job.topology.local_size)


def buckets(tensors: Sequence[tf.Tensor], bucket_bytes: int) -> list[list[int]]:
    """Indices of ``tensors`` grouped into buckets, last tensor first; a bucket closes once it holds
    ``bucket_bytes`` (a tensor of unknown size closes its own). 0: every tensor in one bucket."""
    if bucket_bytes <= 0:
        return [list(reversed(range(len(tensors))))] if tensors else []
    out: list[list[int]] = []
    current: list[int] = []
    held = 0
    for index in reversed(range(len(tensors))):
        current.append(index)
        elements = tensors[index].shape.num_elements()
        held += bucket_bytes if elements is None else elements * tensors[index].dtype.size
        if held >= bucket_bytes:
            out.append(current)
            current, held = [], 0
    if current:
        out.append(current)
    return out


def allreduce_overlapped(tensors: Sequence[tf.Tensor], names: Sequence[str], op: ReduceOp, prescale: float,
                         postscale: float, process_set: ProcessSet,
                         wait_clock: WaitClock | None = None) -> list[tf.Tensor]:
    """Every tensor reduced across the set's ranks, submitted bucket by bucket (see the module);
    ``wait_clock`` counts the time each step's wait for them takes."""
    # A Session runs a TF1 graph's ops in no fixed order (session_ops.py), and a bucket's submit could
    # then start after the step's wait op: one op there submits every gradient and waits.
    plan = buckets(tensors, 0 if in_session_graph() else _bucket_bytes())
    site = next(_sites)
    *early, last = plan
    tickets: list[tf.Tensor] = []
    try:
        for position, bucket in enumerate(early):
            submit = _submitter([names[i] for i in bucket], op, prescale, postscale, process_set, site,
                                starts_step=position == 0)
            (ticket,) = run(lambda *arrays, submit=submit: [np.array(submit(*arrays), np.int64)],
                            [tensors[i] for i in bucket], [tf.int64], [tf.TensorShape([])])
            tickets.append(ticket)
        # The last bucket is ready only when backward ends, and then waited for at once: one op does both,
        # which saves a bridge crossing a step.
        submit_last = _submitter([names[i] for i in last], op, prescale, postscale, process_set, site,
                                 starts_step=not early)
        earlier = len(tickets)

        def submit_last_and_wait(*inputs: np.ndarray) -> list[np.ndarray]:
            ticket = submit_last(*inputs[earlier:])
            if wait_clock is None:
                return _wait(*inputs[:earlier], ticket)
            with wait_clock.timing():
                return _wait(*inputs[:earlier], ticket)
        order = [i for bucket in plan for i in bucket]
        reduced = run(submit_last_and_wait, tickets + [tensors[i] for i in last], [tensors[i].dtype for i in order],
                      [tensors[i].shape for i in order])
    except Exception:
        # Eagerly, the buckets already submitted are known here (a graph's are reaped by its next step).
        if tf.executing_eagerly():
            with _lock:
                _abandon([int(ticket) for ticket in tickets])
        raise
    out: list[Any] = [None] * len(tensors)
    for index, tensor in zip(order, reduced):
        out[index] = tensor
    return out


def _submitter(names: list[str], op: ReduceOp, prescale: float, postscale: float, process_set: ProcessSet,
               site: int, starts_step: bool) -> Callable[..., int]:
    """What a bucket's op runs: submits the gradients (numpy views) and returns the bucket's ticket."""
    def submit(*arrays: np.ndarray) -> int:
        if starts_step:
            with _lock:
                _abandon([ticket for ticket, (owner, _) in _in_flight.items() if owner == site])
                _release_finished()
        outputs = [engine_calls.reused_buffer(a, _buffers, n) for a, n in zip(arrays, names)]
        ticket = next(_tickets)
        # Not as a group: the engine copies a group through its fusion buffer whole, where it reduces a
        # large gradient out of place, reading it from TensorFlow's memory (the views keep it alive).
        _in_flight[ticket] = (site, engine_calls.start_allreduce(arrays, names, op, prescale, postscale,
                                                                 process_set=process_set, outputs=outputs))
        return ticket
    return submit


def _abandon(tickets: list[int]) -> None:
    """Moves the buckets of a step that failed before its wait op out of ``_in_flight``."""
    for ticket in tickets:
        entry = _in_flight.pop(ticket, None)
        if entry is not None:
            _abandoned.append(entry[1])


def _release_finished() -> None:
    """Forgets the abandoned buckets whose requests the engine has finished (collecting their outcomes,
    which nobody reads any more); the others stay until it has (the stall shutdown fails them in time)."""
    for in_flight in list(_abandoned):
        try:
            if not all(in_flight.engine.poll(handle) for handle, _ in in_flight.requests):
                continue
            in_flight.wait()
        except Exception:  # noqa: BLE001 - the step that owned them has already failed with its own error
            pass
        _abandoned.remove(in_flight)


def _wait(*tickets: np.ndarray | int) -> list[np.ndarray]:
    """Every bucket's reduced arrays, in bucket order. Waits for all of them before raising the first
    error, since until then the engine may still write into the arrays."""
    pending = [_in_flight.pop(int(ticket))[1] for ticket in tickets]
    wait_each([in_flight.wait for in_flight in pending])
    return [array for in_flight in pending for array in in_flight.arrays]
