"""Single-process checks of collective.tensorflow's pieces that need no peers."""

from __future__ import annotations

import os
import pickle

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import collective.tensorflow as hvd  # noqa: E402
from collective.tensorflow.graph.bridge import as_tensor, op_name  # noqa: E402
from collective.tensorflow.errors import as_tf_error  # noqa: E402


@pytest.mark.parametrize("compression, wire", [(hvd.Compression.fp16, tf.float16), (hvd.Compression.bf16, tf.bfloat16)])
def test_compression_round_trip(compression, wire: tf.DType) -> None:
    tensor = tf.linspace(tf.constant(-2.0, tf.float64), 2.0, 9)
    sent, ctx = compression.compress(tensor)
    assert sent.dtype == wire
    back = compression.decompress(sent, ctx)
    assert back.dtype == tf.float64 and np.allclose(back.numpy(), tensor.numpy(), atol=1e-2)
    ints = tf.range(4)
    sent, ctx = compression.compress(ints)
    assert sent is ints and compression.decompress(sent, ctx) is ints


@pytest.mark.parametrize("dtype", [tf.complex64, tf.string, tf.uint32, tf.bool])  # int16 is supported
def test_unsupported_dtype_names_tensor_and_dtype(dtype: tf.DType) -> None:
    value = tf.zeros(2, dtype=dtype) if dtype != tf.string else tf.constant(["a"])
    with pytest.raises(hvd.InvalidArgumentError, match=rf"'odd'.*{dtype.name}"):
        as_tensor(value, "odd")


def test_indexed_slices_need_the_sparse_path() -> None:
    slices = tf.IndexedSlices(tf.ones((1, 2)), tf.constant([0]))
    with pytest.raises(hvd.InvalidArgumentError, match="IndexedSlices"):
        as_tensor(slices, "s")


def test_ops_before_init_say_so() -> None:
    assert not hvd.is_initialized()
    with pytest.raises(hvd.NotInitializedError):
        hvd.allreduce(tf.ones(2))


def test_graph_names_repeat_when_a_function_is_traced_again() -> None:
    """A retrace (new shapes) must give its collectives the same names, so ranks that trace a
    different number of times still agree; eager calls leave naming to the engine."""
    seen: list[list[str | None]] = []

    def in_branch(names: list[str | None]) -> tf.Tensor:
        names.append(op_name("allreduce", None))  # a tf.cond branch is a graph of its own
        return tf.constant(0)

    @tf.function
    def step(x: tf.Tensor) -> tf.Tensor:
        names = [op_name("allreduce", None), op_name("allgather", None), op_name("allreduce", "mine")]
        tf.cond(x[0] > 0, lambda: in_branch(names), lambda: tf.constant(1))
        seen.append(names)
        return x

    step(tf.ones(2))
    step(tf.ones(3))  # new shape: traced again
    assert len(seen) == 2
    first = seen[0]
    assert first == ["step.allreduce.0", "step.allgather.1", "mine", "step.allreduce.2"], first
    assert seen[1] == first
    assert op_name("allreduce", None) is None  # eager


def test_xla_compiled_functions_are_refused_clearly() -> None:
    with pytest.raises(hvd.InvalidArgumentError, match="jit_compile=False"):
        tf.function(lambda x: hvd.allreduce(x, name="x"), jit_compile=True)(tf.ones(2))


def test_errors_are_the_classes_horovod_scripts_catch() -> None:
    import collective.keras as keras_hvd
    for module in (hvd, keras_hvd):
        assert isinstance(module.PeerFailureError("rank 1 left"), module.HorovodInternalError)
        assert issubclass(module.InvalidArgumentError, ValueError)
        assert issubclass(module.MismatchError, ValueError)


def test_build_queries_are_exported() -> None:
    import collective
    import collective.keras as keras_hvd
    for module in (hvd, keras_hvd):
        for name in collective.api.capabilities.__all__:
            assert getattr(module, name) is getattr(collective, name) and name in module.__all__


@pytest.mark.parametrize("ours, theirs", [(hvd.MismatchError, tf.errors.FailedPreconditionError),
                                          (hvd.NotInitializedError, tf.errors.FailedPreconditionError),
                                          (hvd.InvalidArgumentError, tf.errors.InvalidArgumentError),
                                          (hvd.PeerFailureError, tf.errors.UnknownError)])
def test_collective_errors_become_horovods_tf_errors_and_pickle(ours: type, theirs: type) -> None:
    """The class Horovod raises, still the collective class, the original as its cause; and it
    survives pickle (a failed rank's error travels to the driver)."""
    original = ours("rank 1 disagrees")
    converted = as_tf_error(original)
    assert isinstance(converted, ours) and isinstance(converted, theirs), type(converted).__mro__
    assert converted.__cause__ is original and str(converted) == "rank 1 disagrees"
    back = pickle.loads(pickle.dumps(converted))
    assert type(back) is type(converted) and str(back) == "rank 1 disagrees"


@pytest.mark.parametrize("graph", ["tf.function", "Session"])
@pytest.mark.parametrize("ours, theirs, text", [
    (hvd.MismatchError, tf.errors.FailedPreconditionError, "ranks disagree on the shape of 'w'"),
    (hvd.MismatchError, tf.errors.FailedPreconditionError, "rank 1: [3]; " * 1000),
    (hvd.NotInitializedError, tf.errors.FailedPreconditionError, "call init() first"),
    (hvd.InvalidArgumentError, tf.errors.InvalidArgumentError, "splits must sum to 4"),
    (hvd.PeerFailureError, tf.errors.UnknownError, "rank 1 exited")])
def test_graph_ops_fail_with_horovods_tf_error_class(graph: str, ours: type, theirs: type, text: str) -> None:
    """A collective that fails inside a graph raises the tf.errors class Horovod raises there, with the
    collective error's class and text in the message; a message too long for the path that carries a
    FailedPrecondition is cut, not turned into another class."""
    from collective.tensorflow.graph.bridge import run

    def failing(array: np.ndarray) -> list[np.ndarray]:
        raise ours(text)

    def build() -> tf.Tensor:
        (out,) = run(failing, [tf.ones(2)], [tf.float32], [[2]])
        return out
    with pytest.raises(theirs) as caught:
        if graph == "Session":
            with tf.Graph().as_default(), tf.compat.v1.Session() as session:
                session.run(build())
        else:
            tf.function(build)()
    message = str(caught.value)
    assert f"{ours.__name__}: {text[:1000]}" in message
    assert (text in message) == (len(text) < 4000) and ("[...]" in message) == (len(text) >= 4000)


def test_gradient_buckets_start_from_the_last_variable() -> None:
    """Buckets follow backward's order (last variable first) and close once they hold BUCKET_BYTES; a
    gradient of unknown size closes its bucket."""
    from collective.tensorflow.graph.overlap import BUCKET_BYTES, buckets

    quarter = BUCKET_BYTES // 16  # float32 elements in a quarter bucket
    tensors = [tf.zeros(quarter * 4), tf.zeros(3), tf.zeros(quarter * 2), tf.zeros(quarter * 2), tf.zeros(5)]
    assert buckets(tensors, BUCKET_BYTES) == [[4, 3, 2], [1, 0]]
    assert buckets([tf.zeros(3)], BUCKET_BYTES) == [[0]]
    assert buckets(tensors, 0) == [[4, 3, 2, 1, 0]]  # one bucket, after backward
    assert buckets([], 0) == []

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def plan(unknown: tf.Tensor) -> tf.Tensor:
        assert buckets([tf.zeros(3), unknown, tf.zeros(4)], BUCKET_BYTES) == [[2, 1], [0]]
        return unknown
    plan.get_concrete_function()


def test_gradient_buckets_overlap_backward_only_where_a_core_is_spare() -> None:
    """By default, buckets where the host has more cores than ranks (the engine reduces on a spare core
    while backward computes), one bucket where every core has a rank; a configured size always wins."""
    from collective.tensorflow.graph.overlap import BUCKET_BYTES, bucket_bytes_for

    assert bucket_bytes_for(None, cores=16, local_ranks=2) == BUCKET_BYTES
    assert bucket_bytes_for(None, cores=2, local_ranks=2) == 0
    assert bucket_bytes_for(None, cores=4, local_ranks=8) == 0
    assert bucket_bytes_for(1 << 20, cores=2, local_ranks=2) == 1 << 20
    assert bucket_bytes_for(0, cores=16, local_ranks=2) == 0
