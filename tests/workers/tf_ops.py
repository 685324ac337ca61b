"""Every collective.tensorflow op, eagerly and inside tf.function, against numpy on however many ranks
the job has. Each case reports RESULT {"case", "mode", "failures"}; tests/tensorflow/test_tf_ops.py
checks them."""

from __future__ import annotations

from typing import Any

from tf_checks import Checks, in_mode, run_cases, to_numpy  # first: it quiets TensorFlow's import

import numpy as np
import tensorflow as tf

import collective.tensorflow as hvd
from common import DTYPES, expected_reduction, rank_input, tolerance

OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product}


def allreduce(c: Checks, mode: str) -> None:
    size, rank = hvd.size(), hvd.rank()
    for dtype_name, dtype in DTYPES.items():
        for op_name, op in OPS.items():
            inputs = [rank_input(r, 15, dtype, op_name, seed=7).reshape(3, 5) for r in range(size)]
            got = in_mode(mode, lambda x: hvd.allreduce(x, op=op), tf.constant(inputs[rank]))
            c.check(got.dtype.name == tf.as_dtype(dtype).name, f"{dtype_name} {op_name}: dtype {got.dtype}")
            want = expected_reduction(inputs, op_name, dtype, size)
            tol = tolerance(dtype, size) if dtype.kind == "f" or dtype_name == "bfloat16" else 0
            c.close(got, want.astype(np.float64), f"{dtype_name} {op_name}", tol=max(tol, 1e-12))


def allreduce_scaling_and_compression(c: Checks, mode: str) -> None:
    size, rank = hvd.size(), hvd.rank()
    inputs = [np.linspace(-1, 1, 8) * (r + 1) for r in range(size)]
    total = np.sum(inputs, axis=0)
    x = tf.constant(inputs[rank])
    got = in_mode(mode, lambda t: hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25), x)
    c.close(got, total * 0.5, "Sum with prescale 2, postscale 0.25")
    got = in_mode(mode, lambda t: hvd.allreduce(t, compression=hvd.Compression.fp16, name="fp16"), x)
    c.check(got.dtype == tf.float64, f"fp16 compression returns {got.dtype}")
    c.close(got, total / size, "fp16-compressed average", tol=2e-3)
    ints = tf.constant(np.arange(4, dtype=np.int32) * (rank + 1))
    got = in_mode(mode, lambda t: hvd.allreduce(t, op=hvd.Sum, compression=hvd.Compression.fp16), ints)
    c.check(got.dtype == tf.int32, "fp16 compression leaves integers alone")
    c.close(got, np.arange(4) * size * (size + 1) / 2, "integer sum under fp16 compression")


def grouped_allreduce(c: Checks, mode: str) -> None:
    size, rank = hvd.size(), hvd.rank()
    shapes = [(3,), (2, 4), (5,)]
    dtypes = [np.float32, np.float64, np.float32]
    inputs = [[np.full(s, r + i + 1, dtype=d) for i, (s, d) in enumerate(zip(shapes, dtypes))] for r in range(size)]
    mine = [tf.constant(a) for a in inputs[rank]]
    got = in_mode(mode, lambda *ts: hvd.grouped_allreduce(list(ts), op=hvd.Sum, name="group"), *mine)
    for i in range(3):
        c.close(got[i], sum(inputs[r][i] for r in range(size)).astype(np.float64), f"member {i}")
        c.check(got[i].dtype == mine[i].dtype, f"member {i} dtype {got[i].dtype}")


def allgather(c: Checks, mode: str) -> None:
    size, rank = hvd.size(), hvd.rank()
    rows = [r + 1 for r in range(size)]  # uneven first dimensions
    for dtype in (np.float32, np.int64, np.uint8, np.bool_, np.int16, np.uint16):
        x = tf.constant(np.full((rows[rank], 3), rank + 1, dtype=dtype))
        got = in_mode(mode, hvd.allgather, x)
        want = np.concatenate([np.full((rows[r], 3), r + 1, dtype=dtype) for r in range(size)])
        c.check(got.dtype == x.dtype, f"{dtype.__name__}: dtype {got.dtype}")
        c.close(got, want, f"{dtype.__name__} uneven allgather")
    if mode == "graph":
        spec = tf.TensorSpec([None, 3], tf.float32)
        fn = tf.function(hvd.allgather, input_signature=[spec])
        c.check(fn.get_concrete_function().structured_outputs.shape.as_list() == [None, 3], "static shape [None, 3]")


def broadcast(c: Checks, mode: str) -> None:
    size, rank = hvd.size(), hvd.rank()
    for root in range(size):
        x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * rank)
        got = in_mode(mode, lambda t: hvd.broadcast(t, root_rank=root), x)
        c.close(got, np.arange(6).reshape(2, 3) + 10.0 * root, f"float root {root}")
    flags = tf.constant([rank == 0, rank != 0, True])
    got = in_mode(mode, lambda t: hvd.broadcast(t, 0, name="flags"), flags)
    c.check(got.dtype == tf.bool and to_numpy(got).tolist() == [True, False, True], f"bool broadcast: {got}")
    big = tf.constant(np.array([2**32 - 1 - rank, 5], dtype=np.uint32))
    got = in_mode(mode, lambda t: hvd.broadcast(t, 0, name="uint32"), big)
    c.check(got.dtype == tf.uint32 and to_numpy(got).tolist() == [2**32 - 1, 5], f"uint32 broadcast: {got}")


def alltoall(c: Checks, mode: str) -> None:
    size, rank = hvd.size(), hvd.rank()
    # Rank r sends (r + d) % 3 rows to rank d, each row holding 100 * r + d.
    splits = [(rank + d) % 3 for d in range(size)]
    data = np.concatenate([np.full((splits[d], 2), 100 * rank + d, np.float32) for d in range(size)])
    out, received = in_mode(mode, lambda t, s: hvd.alltoall(t, splits=s), tf.constant(data), tf.constant(splits))
    want_splits = [(r + rank) % 3 for r in range(size)]
    c.check(to_numpy(received).tolist() == want_splits, f"received splits {received}, want {want_splits}")
    want = np.concatenate([np.full(((r + rank) % 3, 2), 100 * r + rank, np.float32) for r in range(size)])
    c.close(out, want, "uneven alltoall")
    even = tf.constant(np.arange(size * 2, dtype=np.int32) + 10 * rank)
    flags = tf.constant(np.arange(size * 2) % (rank + 2) == 0)
    got = in_mode(mode, hvd.alltoall, flags)
    want_flags = np.concatenate([(np.arange(size * 2) % (r + 2) == 0)[2 * rank:2 * rank + 2] for r in range(size)])
    c.check(got.dtype == tf.bool and to_numpy(got).tolist() == want_flags.tolist(), f"bool alltoall: {got}")
    out = in_mode(mode, hvd.alltoall, even)  # without splits: the tensor alone, as Horovod returns it
    want = np.concatenate([np.arange(2 * rank, 2 * rank + 2) + 10 * r for r in range(size)])
    c.check(not isinstance(out, (tuple, list)), f"alltoall without splits returned a {type(out).__name__}")
    c.close(out, want, "even alltoall")


def reducescatter(c: Checks, mode: str) -> None:
    size, rank = hvd.size(), hvd.rank()
    rows = 2 * size + 1  # not divisible: the first rows % size ranks get one more
    inputs = [np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * (r + 1) for r in range(size)]
    total = np.sum(inputs, axis=0)
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    start = sum(counts[:rank])
    got = in_mode(mode, lambda t: hvd.reducescatter(t, op=hvd.Sum), tf.constant(inputs[rank]))
    c.close(got, total[start:start + counts[rank]], "Sum")
    got = in_mode(mode, hvd.reducescatter, tf.constant(inputs[rank]))
    c.close(got, total[start:start + counts[rank]] / size, "default Average")


def gradients(c: Checks, mode: str) -> None:
    """Each rank's loss is sum(output * w_r), so the output gradient on rank r is w_r."""
    size, rank = hvd.size(), hvd.rank()
    weights = [np.arange(1.0, 7.0).reshape(2, 3) * (r + 1) for r in range(size)]
    w_sum = np.sum(weights, axis=0)

    def grad_of(op: Any, x: tf.Tensor, w: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(op(x) * w)
        return tape.gradient(loss, x)

    x = tf.constant(np.ones((2, 3)))
    w = tf.constant(weights[rank])
    got = in_mode(mode, lambda x, w: grad_of(lambda t: hvd.allreduce(t, op=hvd.Average), x, w), x, w)
    c.close(got, w_sum / size, "allreduce(Average) gradient = average of upstream gradients")
    got = in_mode(mode, lambda x, w: grad_of(lambda t: hvd.allreduce(t, op=hvd.Sum, postscale_factor=3.0), x, w), x, w)
    c.close(got, w_sum * 3, "allreduce(Sum, postscale 3) gradient")
    got = in_mode(mode, lambda x, w: grad_of(lambda t: hvd.broadcast(t, root_rank=size - 1), x, w), x, w)
    c.close(got, w_sum / size if rank == size - 1 else np.zeros((2, 3)),
            "broadcast gradient: the average on the root, else 0 (Horovod's)")
    # reducescatter: Horovod allgathers the output gradients, times size() for Sum, as they are for Average.
    rows = [2] * size
    xr = tf.constant(np.ones((2 * size, 3)))
    gathered_w = np.concatenate([weights[r] for r in range(size)])
    got = in_mode(mode, lambda x, w: grad_of(lambda t: hvd.reducescatter(t, op=hvd.Sum), x, w), xr, w)
    c.close(got, gathered_w * size, "reducescatter(Sum) gradient: allgathered, times size")
    got = in_mode(mode, lambda x, w: grad_of(lambda t: hvd.reducescatter(t, op=hvd.Average), x, w), xr, w)
    c.close(got, gathered_w, "reducescatter(Average) gradient: allgathered")
    # allgather: rank r contributes r + 1 rows; the output gradient rows that came from this rank, averaged.
    rows = [r + 1 for r in range(size)]
    total = sum(rows)
    big_weights = [np.arange(total * 2, dtype=np.float64).reshape(total, 2) + r for r in range(size)]
    start = sum(rows[:rank])
    xg = tf.constant(np.ones((rows[rank], 2)))
    got = in_mode(mode, lambda x, w: grad_of(hvd.allgather, x, w), xg, tf.constant(big_weights[rank]))
    c.close(got, np.mean(big_weights, axis=0)[start:start + rows[rank]], "allgather gradient (Horovod's average)")


def sparse_allreduce(c: Checks, mode: str) -> None:
    size, rank = hvd.size(), hvd.rank()
    slices = tf.IndexedSlices(tf.constant(np.full((2, 3), rank + 1.0)), tf.constant([rank, rank + 1], tf.int64),
                              dense_shape=tf.constant([size + 1, 3], tf.int64))

    def reduce_dense(values: tf.Tensor, indices: tf.Tensor) -> tf.Tensor:
        out = hvd.allreduce(tf.IndexedSlices(values, indices, slices.dense_shape), op=hvd.Average)
        return tf.convert_to_tensor(out)
    got = in_mode(mode, reduce_dense, slices.values, slices.indices)
    want = np.zeros((size + 1, 3))
    for r in range(size):
        want[r:r + 2] += (r + 1.0) / size
    c.close(got, want, "IndexedSlices averaged after densifying")


def errors(c: Checks, mode: str) -> None:
    """Errors are the tf.errors classes Horovod raises in both modes (and still the collective's own,
    eagerly): InvalidArgumentError for bad input, FailedPreconditionError when ranks disagree."""
    size, rank = hvd.size(), hvd.rank()
    for error in (tf.errors.InvalidArgumentError, hvd.InvalidArgumentError):
        c.raises(error, "root_rank 7",
                 lambda: in_mode(mode, lambda t: hvd.broadcast(t, root_rank=7, name="w"), tf.ones(2)),
                 "root rank out of range")
        c.raises(error, "'cplx' has dtype complex64",
                 lambda: in_mode(mode, lambda t: hvd.allreduce(t, name="cplx"), tf.ones(2, tf.complex64)),
                 "unsupported dtype names the tensor and the dtype")
        c.raises(error, "at least one dimension",
                 lambda: in_mode(mode, hvd.allgather, tf.constant(1.0)), "0-d allgather")
    c.raises(tf.errors.InvalidArgumentError, "divide evenly", lambda: in_mode(mode, hvd.alltoall, tf.ones(size * 2 + 1)),
             "uneven alltoall without splits")
    c.raises(tf.errors.InvalidArgumentError, "splits", lambda: in_mode(mode, lambda t: hvd.alltoall(
        t, splits=[size * 2] * size, name=f"bad_splits.{mode}"), tf.ones(size * 2)), "splits beyond the first dimension")
    c.raises(tf.errors.InvalidArgumentError, "splits must be integers", lambda: in_mode(mode, lambda t: hvd.alltoall(
        t, splits=tf.ones(size)), tf.ones(size)), "float splits")
    c.raises(tf.errors.InvalidArgumentError, "postscale_factor must be a real number, got 'x'", lambda: in_mode(
        mode, lambda t: hvd.allreduce(t, postscale_factor="x", name=f"bad_scale.{mode}"), tf.ones(2)),
        "a scale factor that is not a number")
    c.raises(tf.errors.InvalidArgumentError, "root_rank must be an integer rank, got 0.5", lambda: in_mode(
        mode, lambda t: hvd.broadcast(t, root_rank=0.5, name=f"bad_root.{mode}"), tf.ones(2)),
        "a root rank that is not an integer")
    sparse = (tf.ones((1, 2)), tf.constant([0]))
    c.raises(NotImplementedError, "Min", lambda: in_mode(mode, lambda v, i: hvd.allreduce(
        tf.IndexedSlices(v, i), op=hvd.Min), *sparse), "sparse allreduce with Min")
    c.raises(NotImplementedError, "prescale_factor", lambda: in_mode(mode, lambda v, i: hvd.allreduce(
        tf.IndexedSlices(v, i), op=hvd.Sum, prescale_factor=2.0), *sparse), "sparse allreduce with a scale factor")
    # Ranks disagree on a shape: every rank gets the same error, and the job goes on.
    mismatched = tf.ones((2 + rank,))
    mismatch_errors = (tf.errors.FailedPreconditionError, hvd.MismatchError) if mode == "eager" else \
        (tf.errors.FailedPreconditionError,)
    for i, error in enumerate(mismatch_errors):
        c.raises(error, "ranks disagree on the shape",
                 lambda: in_mode(mode, lambda t: hvd.allreduce(t, name=f"bad.{mode}.{i}"), mismatched), "shape mismatch")
    if mode == "eager":
        try:
            hvd.allreduce(mismatched, name="bad.cause")
        except tf.errors.FailedPreconditionError as exc:
            c.check(isinstance(exc.__cause__, hvd.MismatchError), f"cause {exc.__cause__!r}, want the MismatchError")
    after = in_mode(mode, lambda t: hvd.allreduce(t, op=hvd.Sum), tf.ones(3))
    c.close(after, np.full(3, float(size)), "allreduce after a mismatch")


def grouped_ops(c: Checks, mode: str) -> None:
    """grouped_allgather (values and gradient), grouped_reducescatter, and grouped_allreduce of
    IndexedSlices beside dense tensors."""
    size, rank = hvd.size(), hvd.rank()
    a = tf.constant(np.full((rank + 1, 2), rank + 1.0))
    b = tf.constant(np.arange(3, dtype=np.int32)[None] + rank)
    got = in_mode(mode, lambda x, y: hvd.grouped_allgather([x, y], name="gag"), a, b)
    c.close(got[0], np.concatenate([np.full((r + 1, 2), r + 1.0) for r in range(size)]), "grouped_allgather float")
    c.close(got[1], np.stack([np.arange(3) + r for r in range(size)]), "grouped_allgather int32")
    c.check(got[1].dtype == tf.int32, f"grouped_allgather dtype {got[1].dtype}")

    def gathered_grads(x: tf.Tensor, y: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch([x, y])
            gx, gy = hvd.grouped_allgather([x, y])
            loss = tf.reduce_sum(gx) * float(rank + 1) + tf.reduce_sum(gy) * 2.0
        return tape.gradient(loss, [x, y])
    grads = in_mode(mode, gathered_grads, a, tf.constant(np.ones((2, 2))))
    mean_weight = np.mean([r + 1.0 for r in range(size)])
    c.close(grads[0], np.full((rank + 1, 2), mean_weight), "grouped_allgather gradient (average)")
    c.close(grads[1], np.full((2, 2), 2.0), "grouped_allgather second member's gradient")

    rows = 2 * size
    inputs = [np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * (r + 1) for r in range(size)]
    got = in_mode(mode, lambda x, y: hvd.grouped_reducescatter([x, y], op=hvd.Sum),
                  tf.constant(inputs[rank]), tf.constant(inputs[rank] * 2))
    total = np.sum(inputs, axis=0)[2 * rank:2 * rank + 2]
    c.close(got[0], total, "grouped_reducescatter first")
    c.close(got[1], total * 2, "grouped_reducescatter second")

    dense_shape = tf.constant([size + 1, 2], tf.int64)

    def mixed(values: tf.Tensor, indices: tf.Tensor, dense: tf.Tensor) -> list[tf.Tensor]:
        out = hvd.grouped_allreduce([tf.IndexedSlices(values, indices, dense_shape), dense,
                                     tf.IndexedSlices(values * 2, indices, dense_shape)], op=hvd.Average)
        return [tf.convert_to_tensor(t) for t in out]
    got = in_mode(mode, mixed, tf.constant(np.full((1, 2), rank + 1.0)), tf.constant([rank], tf.int64),
                  tf.constant([float(rank)]))
    want = np.zeros((size + 1, 2))
    for r in range(size):
        want[r] += (r + 1.0) / size
    c.close(got[0], want, "grouped sparse member averaged after densifying")
    c.close(got[1], np.array([np.mean(range(size))]), "grouped dense member")
    c.close(got[2], want * 2, "second grouped sparse member")


def in_place_and_rank_ops(c: Checks, mode: str) -> None:
    """broadcast_ assigns the root's value in place and returns it; the *_op functions give the job's
    shape as int32 tensors."""
    size, rank = hvd.size(), hvd.rank()
    variables = [tf.Variable(np.full(3, rank, np.float32)), tf.Variable(rank * 10, dtype=tf.int64)]
    values = in_mode(mode, lambda: hvd.broadcast_(variables, root_rank=size - 1, name="inplace"))
    c.close(variables[0], np.full(3, size - 1.0), "broadcast_ assigns in place")
    c.check(int(variables[1].numpy()) == (size - 1) * 10, f"broadcast_ int64 variable {variables[1].numpy()}")
    c.close(values[0], np.full(3, size - 1.0), "broadcast_ returns the new values")
    ops = in_mode(mode, lambda: [hvd.rank_op(), hvd.size_op(), hvd.local_rank_op(), hvd.local_size_op()])
    c.check([int(to_numpy(t)) for t in ops] == [rank, size, hvd.local_rank(), hvd.local_size()], f"*_op gave {ops}")
    c.check(all(t.dtype == tf.int32 for t in ops), f"*_op dtypes {[t.dtype for t in ops]}")


def tf1_session(c: Checks, mode: str) -> None:
    """Ops built in a tf.compat.v1 graph and run in a Session: each mode builds its own graph (the
    eager/graph split does not apply; both run the same checks on fresh graphs)."""
    size, rank = hvd.size(), hvd.rank()
    with tf.Graph().as_default():
        x = tf.constant(np.full(3, rank + 1.0))
        summed = hvd.allreduce(x, op=hvd.Sum)
        gathered = hvd.allgather(tf.reshape(x, [1, 3]))
        (grad,) = tf.gradients(tf.reduce_sum(hvd.allreduce(x, op=hvd.Average)), x)
        # A Session runs only what the fetched tensor needs: the non-root ranks' zero gradient must still
        # depend on the allreduce the root waits in.
        (broadcast_grad,) = tf.gradients(tf.reduce_sum(hvd.broadcast(x, root_rank=0) * (rank + 1.0)), x)
        # Independent collectives fetched together: more than the Session's inter-op threads, which would
        # each block in a different one on each rank unless every rank starts them in the order built.
        many = [hvd.allgather(tf.fill([1 + (i % 3), 2], float(rank + i))) for i in range(20)]
        twice = hvd.grouped_allgather([tf.reshape(x, [1, 3]), tf.reshape(x, [3, 1])])
        grads_twice = [tf.gradients(tf.reduce_sum(twice[0]) + tf.reduce_sum(twice[1]), x)[0] for _ in range(2)]
        variable = tf.compat.v1.Variable(np.full(2, float(rank)))
        sync = hvd.broadcast_global_variables(0)
        # A TF1 optimizer: one step of plain SGD (rate 1) on loss = sum(w * (rank + 1)) moves w by the mean.
        weight = tf.compat.v1.Variable(np.zeros(2))
        optimizer = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0))
        train = optimizer.minimize(tf.reduce_sum(weight * (rank + 1.0)), var_list=[weight])
        # Local aggregation over 2 passes, averaged: every second pass applies the mean of rank + 1.
        aggregated = tf.compat.v1.Variable(np.zeros(2))
        aggregating = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                               backward_passes_per_step=2, average_aggregated_gradients=True)
        train_aggregated = aggregating.minimize(tf.reduce_sum(aggregated * (rank + 1.0)), var_list=[aggregated])
        barrier = hvd.barrier()
        with tf.compat.v1.Session() as session:
            session.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()])
            got_sum, got_gathered, got_grad = session.run([summed, gathered, grad])
            got_broadcast_grad = session.run(broadcast_grad)
            got_many = session.run(many)
            got_grads_twice = session.run(grads_twice)
            session.run(sync)
            got_variable = session.run(variable)
            session.run(barrier)
            session.run(train)
            got_weight = session.run(weight)
            got_aggregated = []
            for _ in range(4):
                session.run(train_aggregated)
                got_aggregated.append(session.run(aggregated)[0])
    c.close(got_sum, np.full(3, size * (size + 1) / 2), "Session allreduce")
    c.close(got_gathered, np.stack([np.full(3, r + 1.0) for r in range(size)]), "Session allgather")
    c.close(got_grad, np.ones(3), "Session allreduce gradient")
    c.close(got_broadcast_grad, np.full(3, (size + 1) / 2 if rank == 0 else 0.0), "Session broadcast gradient")
    for i, got in enumerate(got_many):
        c.close(got, np.concatenate([np.full((1 + (i % 3), 2), float(r + i)) for r in range(size)]),
                f"Session allgather {i} of 20 fetched together")
    for got in got_grads_twice:  # each member's gradient: the allgathered upstream ones (1s) of this rank's rows
        c.close(got, np.full(3, 2.0), "grouped_allgather gradient, backward built twice and run together")
    c.close(got_variable, np.zeros(2), "broadcast_global_variables in a Session")
    c.close(got_weight, np.full(2, -(size + 1) / 2), "DistributedOptimizer of a TF1 optimizer")
    mean = (size + 1) / 2
    c.close(np.array(got_aggregated), np.array([0, -mean, -mean, -2 * mean]), "backward_passes_per_step=2")
    c.raises(RuntimeError, "eager", lambda: hvd.broadcast_global_variables(0), "broadcast_global_variables eagerly")
    # Horovod's TF1 recipe: a MonitoredTrainingSession whose hook starts every rank from the root's variables.
    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()
        start = tf.compat.v1.Variable(np.full(2, float(rank)))
        hooks = [hvd.BroadcastGlobalVariablesHook(size - 1)]
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as session:
            got_start = session.run(start)
    c.close(got_start, np.full(2, size - 1.0), "BroadcastGlobalVariablesHook in a MonitoredTrainingSession")
    c.raises(hvd.InvalidArgumentError, "root_rank must be an integer rank, got '0'",
             lambda: hvd.BroadcastGlobalVariablesHook("0"), "a hook's root rank that is not an integer")
    with tf.Graph().as_default():
        mismatched = hvd.allgather(tf.ones((1, 2 + rank)), name="session_mismatch")
        after = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="after_mismatch")
        with tf.compat.v1.Session() as session:
            c.raises(tf.errors.FailedPreconditionError, "MismatchError: ranks disagree on the trailing shape",
                     lambda: session.run(mismatched), "Session allgather of mismatched shapes")
            # A collective built later is not run again with it: the fetch needs only its own.
            c.close(session.run(after), np.array([float(size)]), "a later collective after a failed one")
    tf1_horovod_recipe(c)
    tf1_fetches_run_only_their_collectives(c)


def tf1_horovod_recipe(c: Checks) -> None:
    """Horovod's TF1 example: data fed through a placeholder, DistributedOptimizer.minimize, and a
    BroadcastGlobalVariablesHook (whose broadcast is built after the training op, in the hook's begin)
    in a MonitoredTrainingSession that stops after 4 steps."""
    size, rank = hvd.size(), hvd.rank()
    with tf.Graph().as_default():
        features = tf.compat.v1.placeholder(tf.float64, [None, 2])
        weights = tf.compat.v1.Variable(np.full((2, 1), float(rank)))
        loss = tf.reduce_sum(tf.matmul(features, weights))
        step = tf.compat.v1.train.get_or_create_global_step()
        optimizer = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5))
        train = optimizer.minimize(loss, global_step=step)
        hooks = [hvd.BroadcastGlobalVariablesHook(0), tf.compat.v1.train.StopAtStepHook(last_step=4)]
        steps = 0
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as session:
            while not session.should_stop():
                session.run(train, feed_dict={features: np.full((4, 2), rank + 1.0)})
                steps += 1
                if steps == 3:  # a stopped session runs nothing more, so read before the last step
                    final = session.run(weights)
    # From rank 0's zeros, each step moves every weight by 0.5 x the mean over ranks of 4 (rank + 1).
    c.check(steps == 4, f"the recipe ran {steps} steps, want 4")
    c.close(final, np.full((2, 1), -3 * 0.5 * 4 * (size + 1) / 2), "Horovod's TF1 recipe (placeholder, hook)")


def tf1_fetches_run_only_their_collectives(c: Checks) -> None:
    """Independent collectives built in a different order on each rank, fetched together by a Session
    with a single inter-op thread, complete: none holds the thread while it waits. And a fetch runs no
    collective it does not need: one that needs a feed is left out when it is not fetched."""
    size, rank = hvd.size(), hvd.rank()
    with tf.Graph().as_default():
        order = list(range(6)) if rank % 2 == 0 else list(reversed(range(6)))
        built = {i: hvd.allreduce(tf.constant([float(i + rank)]), op=hvd.Sum, name=f"independent.{i}") for i in order}
        fed = tf.compat.v1.placeholder(tf.float64, [1])
        needs_feed = hvd.allreduce(fed, op=hvd.Sum, name="needs_feed")
        later = hvd.allreduce(tf.constant([2.0]), op=hvd.Sum, name="after_needs_feed")
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=1, intra_op_parallelism_threads=1)
        with tf.compat.v1.Session(config=config) as session:
            got = session.run([built[i] for i in range(6)])
            c.close(session.run(later), np.array([2.0 * size]), "a collective fetched without an earlier one's feed")
            c.close(session.run(needs_feed, feed_dict={fed: [1.0]}), np.array([float(size)]), "the fed one")
    for i, value in enumerate(got):
        c.close(value, np.array([float(size * i + size * (size - 1) / 2)]),
                f"independent collective {i}, started in another order on every other rank, one thread")


def barrier_join_objects(c: Checks, mode: str) -> None:
    size, rank = hvd.size(), hvd.rank()
    in_mode(mode, hvd.barrier)
    last = in_mode(mode, hvd.join)
    c.check(0 <= int(last) < size, f"join returned {last}")
    if mode == "eager":
        c.check(hvd.broadcast_object({"from": rank, "list": [1, 2]}, root_rank=size - 1) ==
                {"from": size - 1, "list": [1, 2]}, "broadcast_object")
        c.check(hvd.allgather_object(("rank", rank) * (rank + 1)) == [("rank", r) * (r + 1) for r in range(size)],
                "allgather_object")
        # Horovod's TF1 builder binds the arguments; scripts also branch on hvd._executing_eagerly().
        bcast = hvd.broadcast_object_fn(root_rank=0, name="object_fn")
        c.check(bcast({"rank": rank}) == {"rank": 0}, "broadcast_object_fn")
        c.check(hvd._executing_eagerly() and hvd.util._executing_eagerly(), "_executing_eagerly when eager")
        c.check(not tf.function(lambda: tf.constant(hvd.util._executing_eagerly()))(), "_executing_eagerly traced")


def broadcast_variables(c: Checks, mode: str) -> None:
    size, rank = hvd.size(), hvd.rank()
    variables = [tf.Variable(np.full((2, 2), rank, np.float32)), tf.Variable(rank + 5, dtype=tf.int64),
                 tf.Variable([rank == 1, True])]
    if mode == "graph":
        tf.function(lambda: hvd.broadcast_variables(variables, root_rank=1))()
    else:
        hvd.broadcast_variables(variables, root_rank=1)
    c.close(variables[0], np.full((2, 2), 1.0), "float variable")
    c.check(int(variables[1].numpy()) == 6, f"int64 variable {variables[1].numpy()}")
    c.check(variables[2].numpy().tolist() == [True, True], f"bool variable {variables[2].numpy()}")


def repeated_graph_calls(c: Checks, mode: str) -> None:
    """A tf.function called many times, with several collectives, stays in step on every rank."""
    size, rank = hvd.size(), hvd.rank()

    def step(x: tf.Tensor) -> tf.Tensor:
        a = hvd.allreduce(x, op=hvd.Sum)
        b = hvd.allgather(tf.reshape(x, [1, -1]))
        return a + tf.reduce_sum(b, axis=0)
    fn = tf.function(step) if mode == "graph" else step
    for i in range(20):
        got = fn(tf.fill([4], float(rank + i)))
        c.close(got, np.full(4, 2.0 * sum(r + i for r in range(size))), f"call {i}")



def process_sets(c: Checks, mode: str) -> None:
    """Evens and odds as two sets used side by side: each op (and allgather's gradient) runs among the
    set's ranks only, root_rank stays a global rank, and a rank outside a set is refused."""
    size, rank = hvd.size(), hvd.rank()
    evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(size) if r % 2 == 1])
    try:
        mine, other = (evens, odds) if rank % 2 == 0 else (odds, evens)
        members, me = mine.ranks, mine.rank()
        c.check(mine.included() and not other.included() and mine.size() == len(members), "set membership")
        # Horovod's id-keyed queries as int32 tensors, answered for sets this rank is in and not in.
        ops = in_mode(mode, lambda: [hvd.size_op(process_set_id=mine.process_set_id),
                                     hvd.size_op(process_set_id=other.process_set_id),
                                     hvd.process_set_included_op(mine.process_set_id),
                                     hvd.process_set_included_op(other.process_set_id),
                                     hvd.process_set_included_op()])
        c.check([int(to_numpy(t)) for t in ops] == [len(members), len(other.ranks), 1, 0, 1], f"set ops gave {ops}")
        if mode == "eager":
            c.raises(ValueError, "no process set with id 99", lambda: hvd.size_op(process_set_id=99), "unknown set id")
        x = tf.constant([float(rank + 1)] * 3, tf.float64)
        got = in_mode(mode, lambda t: hvd.allreduce(t, op=hvd.Sum, process_set=mine), x)
        c.close(got, np.full(3, float(sum(r + 1 for r in members))), "allreduce Sum within the set")
        got = in_mode(mode, lambda t: hvd.broadcast(t, members[-1], process_set=mine), x)
        c.close(got, np.full(3, members[-1] + 1.0), "broadcast from the set's last (global) rank")
        got = in_mode(mode, lambda t: hvd.allgather(t, process_set=mine), tf.constant([[float(rank)]], tf.float64))
        c.close(got, np.array([[float(r)] for r in members]), "allgather within the set")
        rows = tf.constant([[10.0 * rank + i] for i in range(len(members))], tf.float64)
        got = in_mode(mode, lambda t: hvd.alltoall(t, process_set=mine), rows)
        c.close(got, np.array([[10.0 * r + me] for r in members]), "alltoall within the set")
        got = in_mode(mode, lambda t: hvd.reducescatter(t, op=hvd.Sum, process_set=mine),
                      tf.ones([2 * len(members), 2], tf.float64))
        c.close(got, np.full((2, 2), float(len(members))), "reducescatter within the set")

        def allgather_gradient(t: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                tape.watch(t)
                out = hvd.allgather(t, process_set=mine)
                weights = tf.cast(tf.range(1, tf.shape(out)[0] + 1), tf.float64)[:, tf.newaxis]
                loss = tf.reduce_sum(out * weights)
            return tape.gradient(loss, t)
        got = in_mode(mode, allgather_gradient, tf.fill([2, 2], tf.constant(float(rank), tf.float64)))
        # Horovod's allgather gradient: this rank's rows of the set's averaged output gradient.
        c.close(got, np.array([[2.0 * me + 1] * 2, [2.0 * me + 2] * 2]), "allgather gradient within the set")
        in_mode(mode, lambda: hvd.barrier(process_set=mine))
        variable = tf.Variable(np.full(2, rank, np.float32))
        in_mode(mode, lambda: hvd.broadcast_variables([variable], members[0], process_set=mine))
        c.close(variable, np.full(2, float(members[0])), "broadcast_variables within the set")
        variable.assign(np.full(2, rank, np.float32))
        in_mode(mode, lambda: hvd.broadcast_([variable], members[-1], name="set_inplace", process_set=mine))
        c.close(variable, np.full(2, float(members[-1])), "broadcast_ within the set")
        if mode == "eager":
            c.check(hvd.broadcast_object({"r": rank}, members[-1], process_set=mine) == {"r": members[-1]},
                    "broadcast_object within the set")
            c.check(hvd.allgather_object(rank, process_set=mine) == list(members), "allgather_object within the set")
        if size > 1:
            try:
                hvd.allreduce(x, process_set=other)
                c.check(False, "an allreduce on a set without this rank ran")
            except ValueError as e:
                c.check(f"rank {rank} is not in process set" in str(e), f"unclear refusal: {e}")
                # Horovod's op fails with tf.errors.InvalidArgumentError there.
                c.check(isinstance(e, tf.errors.InvalidArgumentError), f"refusal is a {type(e).__mro__}")
    finally:
        hvd.remove_process_set(odds)
        hvd.remove_process_set(evens)


def main() -> None:
    hvd.init()
    run_cases([allreduce, allreduce_scaling_and_compression, grouped_allreduce, allgather, broadcast, alltoall,
               reducescatter, gradients, sparse_allreduce, errors, barrier_join_objects, broadcast_variables,
               repeated_graph_calls, grouped_ops, in_place_and_rank_ops, tf1_session, process_sets])
    hvd.shutdown()


if __name__ == "__main__":
    main()
