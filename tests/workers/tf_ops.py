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
    for dtype in (np.float32, np.int64, np.uint8):
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
    out, received = in_mode(mode, hvd.alltoall, even)
    want = np.concatenate([np.arange(2 * rank, 2 * rank + 2) + 10 * r for r in range(size)])
    c.close(out, want, "even alltoall")
    c.check(to_numpy(received).tolist() == [2] * size, f"even received splits {received}")


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
    c.close(got, w_sum if rank == size - 1 else np.zeros((2, 3)), "broadcast gradient: sum on the root, else 0")
    # allgather: rank r contributes r + 1 rows; the output gradient rows that came from this rank, summed.
    rows = [r + 1 for r in range(size)]
    total = sum(rows)
    big_weights = [np.arange(total * 2, dtype=np.float64).reshape(total, 2) + r for r in range(size)]
    start = sum(rows[:rank])
    xg = tf.constant(np.ones((rows[rank], 2)))
    got = in_mode(mode, lambda x, w: grad_of(hvd.allgather, x, w), xg, tf.constant(big_weights[rank]))
    c.close(got, np.sum(big_weights, axis=0)[start:start + rows[rank]], "allgather gradient")


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
    """Bad input found while tracing raises the collective's own error in both modes; what only the
    running op can see arrives from a graph as a tf.errors.InvalidArgumentError."""
    size, rank = hvd.size(), hvd.rank()
    c.raises(hvd.InvalidArgumentError, "root_rank 7",
             lambda: in_mode(mode, lambda t: hvd.broadcast(t, root_rank=7, name="w"), tf.ones(2)),
             "root rank out of range")
    c.raises(hvd.InvalidArgumentError, "'cplx' has dtype complex64",
             lambda: in_mode(mode, lambda t: hvd.allreduce(t, name="cplx"), tf.ones(2, tf.complex64)),
             "unsupported dtype names the tensor and the dtype")
    c.raises(hvd.InvalidArgumentError, "at least one dimension",
             lambda: in_mode(mode, hvd.allgather, tf.constant(1.0)), "0-d allgather")
    uneven_error = hvd.InvalidArgumentError if mode == "eager" else tf.errors.InvalidArgumentError
    c.raises(uneven_error, "divide evenly", lambda: in_mode(mode, hvd.alltoall, tf.ones(size * 2 + 1)),
             "uneven alltoall without splits")
    c.raises(hvd.InvalidArgumentError, "Min", lambda: in_mode(mode, lambda v, i: hvd.allreduce(
        tf.IndexedSlices(v, i), op=hvd.Min), tf.ones((1, 2)), tf.constant([0])), "sparse allreduce with Min")
    # Ranks disagree on a shape: every rank gets the same MismatchError, and the job goes on.
    mismatched = tf.ones((2 + rank,))
    mismatch_error = hvd.MismatchError if mode == "eager" else tf.errors.InvalidArgumentError
    c.raises(mismatch_error, "ranks disagree on the shape", lambda: in_mode(mode, lambda t: hvd.allreduce(t, name=f"bad.{mode}"),
                                                         mismatched), "shape mismatch")
    after = in_mode(mode, lambda t: hvd.allreduce(t, op=hvd.Sum), tf.ones(3))
    c.close(after, np.full(3, float(size)), "allreduce after a mismatch")


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



def main() -> None:
    hvd.init()
    run_cases([allreduce, allreduce_scaling_and_compression, grouped_allreduce, allgather, broadcast, alltoall,
               reducescatter, gradients, sparse_allreduce, errors, barrier_join_objects, broadcast_variables,
               repeated_graph_calls])
    hvd.shutdown()


if __name__ == "__main__":
    main()
