"""Training with collective.tensorflow and collective.keras on real ranks, against single-process
training on the combined batch (float64, so agreement is to ~1e-10). Cases report RESULT {"case",
"mode", "failures"}; tests/tensorflow/test_tf_training.py checks them. argv[1]: a scratch directory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tf_checks import Checks, in_mode, run_cases  # first: it quiets TensorFlow's import

import keras
import numpy as np
import tensorflow as tf

import collective.keras as hvd
import collective.tensorflow as hvd_tf
from collective.keras.optimizer import is_distributed
from collective.tensorflow.graph import overlap

FEATURES, BATCH, STEPS, EPOCHS = 4, 8, 4, 2
TOL = 1e-10
SCRATCH: list[Path] = []  # argv[1], where models are saved


def rank_data(rank: int, rows: int = BATCH * STEPS) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 + rank)
    x = rng.normal(size=(rows, FEATURES))
    y = np.tanh(x @ np.array([[0.5], [-1.0], [2.0], [0.3]])) + 0.1 * rng.normal(size=(rows, 1))
    return x, y


def combined(block: int, ranks: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The data of ``ranks`` (default every rank) interleaved so that single-process batch k (``block``
    rows from each rank, in rank order) is the union of the ranks' batch k."""
    parts = [rank_data(r) for r in (range(hvd.size()) if ranks is None else ranks)]
    rows = parts[0][0].shape[0]
    xs, ys = [], []
    for start in range(0, rows, block):
        for x, y in parts:
            xs.append(x[start:start + block])
            ys.append(y[start:start + block])
    return np.concatenate(xs), np.concatenate(ys)


def build_model(seed: int) -> keras.Model:
    model = keras.Sequential([keras.Input((FEATURES,), dtype="float64"),
                              keras.layers.Dense(8, activation="tanh", dtype="float64"),
                              keras.layers.Dense(1, dtype="float64")])
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(scale=0.5, size=w.shape) for w in model.get_weights()])
    return model


def same_on_all_ranks(c: Checks, weights: list[np.ndarray], what: str) -> None:
    everyone = hvd.allgather_object([w.tolist() for w in weights])
    c.check(all(other == everyone[0] for other in everyone), f"{what}: weights differ between ranks")


def close_weights(c: Checks, got: list[np.ndarray], want: list[np.ndarray], what: str, tol: float = TOL) -> None:
    worst = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
    c.check(worst <= tol, f"{what}: weights differ from single-process training by {worst:.3g}")


# ---- DistributedGradientTape ----------------------------------------------------------------------

def tape_matches_single_process(c: Checks, mode: str) -> None:
    rank = hvd.rank()
    model = build_model(seed=rank)  # ranks start apart; broadcast_variables aligns them
    hvd.broadcast_variables(model.variables, root_rank=0)
    reference = build_model(seed=0)
    lr = 0.1

    def step(model: keras.Model, x: tf.Tensor, y: tf.Tensor, distributed: bool) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        if distributed:
            tape = hvd_tf.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        for var, grad in zip(model.trainable_variables, grads):
            var.assign_sub(lr * grad)
        return loss

    dist_step = tf.function(step) if mode == "graph" else step
    x, y = rank_data(rank)
    cx, cy = combined(BATCH)
    for k in range(STEPS):
        dist_step(model, x[k * BATCH:(k + 1) * BATCH], y[k * BATCH:(k + 1) * BATCH], True)
        step(reference, cx[k * 2 * BATCH:(k + 1) * 2 * BATCH], cy[k * 2 * BATCH:(k + 1) * 2 * BATCH], False)
    same_on_all_ranks(c, model.get_weights(), "tape")
    close_weights(c, model.get_weights(), reference.get_weights(), "tape")


def ancestors(op: tf.Operation) -> set[str]:
    """The names of every op ``op`` waits for, through data and control edges."""
    seen: set[str] = set()
    stack = [op]
    while stack:
        current = stack.pop()
        for parent in [t.op for t in current.inputs] + list(current.control_inputs):
            if parent.name not in seen:
                seen.add(parent.name)
                stack.append(parent)
    return seen


def tape_overlaps_backward(c: Checks, mode: str) -> None:
    """With one gradient per bucket, training still matches one process; and in a graph the first
    bucket's submit op (the last variable) does not wait for the first layer's gradient, so it can run
    while backward computes that gradient."""
    saved = overlap._bucket_bytes
    overlap._bucket_bytes = lambda: 1  # whatever the host's cores
    try:
        tape_matches_single_process(c, mode)
        if mode == "graph":
            model = build_model(seed=0)

            @tf.function
            def gradients(x: tf.Tensor, y: tf.Tensor) -> Any:
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean((model(x) - y) ** 2)
                return hvd_tf.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)
            spec = tf.TensorSpec([None, FEATURES], tf.float64), tf.TensorSpec([None, 1], tf.float64)
            graph = gradients.get_concrete_function(*spec).graph
            bridge_ops = [op for op in graph.get_operations() if op.type == "EagerPyFunc"]
            # A submit op returns a ticket, and (as every bridge op) the path its error check reads.
            submits = [op for op in bridge_ops if [t.dtype for t in op.outputs] == [tf.int64, tf.string]]
            (wait,) = [op for op in bridge_ops if op not in submits]
            # The last bucket (the first variable's gradient) is submitted by the op that waits.
            c.check(len(submits) == len(model.trainable_variables) - 1,
                    f"{len(submits)} submit ops, want one a variable but the first")
            first_kernel_gradient = wait.inputs[len(submits)].op
            c.check(first_kernel_gradient.name not in ancestors(submits[0]),
                    "the last variable's submit waits for the first layer's gradient")
    finally:
        overlap._bucket_bytes = saved


def tape_shape_mismatch(c: Checks, mode: str) -> None:
    """Ranks whose gradients disagree on a shape get the same clear error from gradient(), with the
    other gradients' buckets waited for, and the next step trains as usual."""
    rank, size = hvd.rank(), hvd.size()
    ragged = tf.Variable(np.ones(2 + rank))
    agreed = tf.Variable(np.ones((600, 600)))  # a bucket of its own, reduced beside the bad one

    def grads(variables: list[tf.Variable]) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(v) * (rank + 1.0) for v in variables])
        return hvd_tf.DistributedGradientTape(tape).gradient(loss, variables)
    c.raises(tf.errors.FailedPreconditionError, "ranks disagree on the shape", lambda: in_mode(mode, grads, [agreed, ragged]),
             "gradients of different shapes")
    (got,) = in_mode(mode, grads, [agreed])
    c.close(got, np.full((600, 600), (size + 1) / 2), "a step after the mismatch")


def tape_sparse_gradients(c: Checks, mode: str) -> None:
    """An embedding's IndexedSlices gradient, gathered or densified, gives single-process weights."""
    rank, size = hvd.rank(), hvd.size()
    ids = [np.array([[r, 3], [1, r + 2]]) for r in range(size)]
    for sparse_as_dense in (False, True):
        table = tf.Variable(np.arange(24, dtype=np.float64).reshape(6, 4) / 10)
        reference = tf.Variable(table.numpy())

        def loss_of(var: tf.Variable, batch: np.ndarray) -> tf.Tensor:
            return tf.reduce_mean(tf.nn.embedding_lookup(var, batch) ** 2)

        def step(batch: tf.Tensor) -> Any:
            with tf.GradientTape() as tape:
                loss = loss_of(table, batch)
            tape = hvd_tf.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense)
            (grad,) = tape.gradient(loss, [table])
            table.assign_sub(0.5 * tf.convert_to_tensor(grad))
            return isinstance(grad, tf.IndexedSlices)

        was_sparse = (tf.function(step) if mode == "graph" else step)(tf.constant(ids[rank]))
        with tf.GradientTape() as tape:
            loss = tf.add_n([loss_of(reference, b) for b in ids]) / size
        reference.assign_sub(0.5 * tf.convert_to_tensor(tape.gradient(loss, [reference])[0]))
        if mode == "eager":
            c.check(bool(was_sparse) == (not sparse_as_dense), f"sparse_as_dense={sparse_as_dense}: sparse {was_sparse}")
        close_weights(c, [table.numpy()], [reference.numpy()], f"sparse_as_dense={sparse_as_dense}")


def tape_options(c: Checks, mode: str) -> None:
    """op=Sum, fp16 compression, gradient_predivide_factor and None gradients, against the per-rank
    gradients (rank r's gradient of sum(w * (r + 1) * k) is (r + 1) * k)."""
    rank, size = hvd.rank(), hvd.size()
    w = tf.Variable(np.ones(3))
    unused = tf.Variable(np.ones(2))
    k = tf.constant([1.0, 2.0, 3.0], tf.float64)
    mean_grad = np.mean([(r + 1) * k.numpy() for r in range(size)], axis=0)

    def grads(**options: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * (rank + 1) * k)
        return hvd_tf.DistributedGradientTape(tape, **options).gradient(loss, [w, unused])
    run = tf.function(grads) if mode == "graph" else grads
    got, none = run(op=hvd.Sum)
    c.close(got, mean_grad * size, "op=Sum")
    c.check(none is None, f"a variable the loss does not use gets {none}")
    got, _ = run(compression=hvd.Compression.fp16)
    c.check(got.dtype == tf.float64, f"fp16 compression returns {got.dtype}")
    c.close(got, mean_grad, "fp16 compression", tol=1e-3)
    got, _ = run(gradient_predivide_factor=2.0)
    c.close(got, mean_grad, "gradient_predivide_factor=2")


# ---- Keras -------------------------------------------------------------------------------------

class Recorder(keras.callbacks.Callback):
    """Keeps copies of what fit logged and the learning rate at each batch."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch_logs: list[dict] = []
        self.batch_lrs: list[tuple[int, int, float]] = []
        self.epoch = 0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self.batch_lrs.append((self.epoch, batch, float(self.model.optimizer.learning_rate.numpy())))

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.epoch_logs.append(dict(logs or {}))


def compiled(model: keras.Model, optimizer: Any, mode: str) -> keras.Model:
    model.compile(optimizer=optimizer, loss="mse", run_eagerly=(mode == "eager"))
    return model


def fit_matches_single_process(c: Checks, mode: str) -> None:
    rank = hvd.rank()
    model = compiled(build_model(seed=rank), hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)), mode)
    raw, averaged = Recorder(), Recorder()
    x, y = rank_data(rank)
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
              callbacks=[hvd.BroadcastGlobalVariablesCallback(0), raw, hvd.MetricAverageCallback(), averaged])
    reference = compiled(build_model(seed=0), keras.optimizers.SGD(0.05, momentum=0.9), mode)
    cx, cy = combined(BATCH)
    reference.fit(cx, cy, batch_size=2 * BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    same_on_all_ranks(c, model.get_weights(), "fit")
    close_weights(c, model.get_weights(), reference.get_weights(), "fit")
    c.check(int(model.optimizer.iterations.numpy()) == EPOCHS * STEPS, f"iterations {model.optimizer.iterations}")
    # MetricAverageCallback: what later callbacks see is the mean over ranks of what fit logged.
    everyone = hvd.allgather_object(raw.epoch_logs)
    for epoch, logs in enumerate(averaged.epoch_logs):
        want = np.mean([ranks_logs[epoch]["loss"] for ranks_logs in everyone])
        c.check(abs(logs["loss"] - want) < 1e-12, f"epoch {epoch}: averaged loss {logs['loss']}, want {want}")
    c.check(len({round(r[0]["loss"], 12) for r in everyone}) == hvd.size(), "test setup: ranks' raw losses differ")


def fit_backward_passes_per_step(c: Checks, mode: str) -> None:
    """Two local passes per reduction, averaged: one update per two batches of every rank."""
    rank = hvd.rank()
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=2,
                                         average_aggregated_gradients=True)
    model = compiled(build_model(seed=rank), optimizer, mode)
    x, y = rank_data(rank)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.BroadcastGlobalVariablesCallback(0)])
    reference = compiled(build_model(seed=0), keras.optimizers.SGD(0.1), mode)
    cx, cy = combined(2 * BATCH)
    reference.fit(cx, cy, batch_size=4 * BATCH, epochs=1, shuffle=False, verbose=0)
    same_on_all_ranks(c, model.get_weights(), "backward_passes_per_step=2")
    close_weights(c, model.get_weights(), reference.get_weights(), "backward_passes_per_step=2")
    c.check(int(model.optimizer.iterations.numpy()) == STEPS, f"iterations {model.optimizer.iterations}")
    # Horovod's _agg_helper.counter: passes summed locally since the last reduction.
    c.check(int(optimizer._agg_helper.counter.numpy()) == STEPS % 2, f"counter {optimizer._agg_helper.counter}")
    model.train_on_batch(x[:BATCH], y[:BATCH])
    c.check(int(optimizer._agg_helper.counter.numpy()) == (STEPS + 1) % 2, "counter after one more pass")
    c.check(hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))._agg_helper is None, "_agg_helper without aggregation")


def learning_rate_warmup(c: Checks, mode: str) -> None:
    size = hvd.size()
    initial, warmup = 0.4, 2
    model = compiled(build_model(seed=0), hvd.DistributedOptimizer(keras.optimizers.SGD(initial)), mode)
    recorder = Recorder()
    x, y = rank_data(hvd.rank())
    history = model.fit(x, y, batch_size=BATCH, epochs=warmup + 1, shuffle=False, verbose=0,
                        callbacks=[hvd.LearningRateWarmupCallback(initial, warmup_epochs=warmup), recorder])
    for epoch, batch, lr in recorder.batch_lrs:
        progress = min(epoch + (batch + 1) / STEPS, warmup) if epoch < warmup else warmup
        want = initial / size * (progress * (size - 1) / warmup + 1)
        c.check(abs(lr - want) < 1e-6, f"epoch {epoch} batch {batch}: lr {lr}, want {want}")
    c.check(abs(recorder.batch_lrs[0][2] - initial / size * (1 + (size - 1) / (STEPS * warmup))) < 1e-6,
            "warm-up starts near initial_lr / size")
    c.check(abs(history.history["lr"][-1] - initial) < 1e-6, f"logged lr {history.history.get('lr')}")


def learning_rate_schedule(c: Checks, mode: str) -> None:
    initial = 0.2
    model = compiled(build_model(seed=0), hvd.DistributedOptimizer(keras.optimizers.SGD(initial)), mode)
    recorder = Recorder()
    x, y = rank_data(hvd.rank())
    schedule = [hvd.LearningRateScheduleCallback(initial, multiplier=0.5, start_epoch=1, end_epoch=2),
                hvd.LearningRateScheduleCallback(initial, multiplier=lambda e: 0.1 * e, start_epoch=2,
                                                 staircase=False)]
    model.fit(x, y, batch_size=BATCH, epochs=3, shuffle=False, verbose=0, callbacks=schedule + [recorder])
    for epoch, batch, lr in recorder.batch_lrs:
        want = initial if epoch == 0 else initial * 0.5 if epoch == 1 else initial * 0.1 * (epoch + batch / STEPS)
        c.check(abs(lr - want) < 1e-6, f"epoch {epoch} batch {batch}: lr {lr}, want {want}")
    # Momentum correction: a rate change by r scales SGD's momentum buffers by r.
    sgd = compiled(build_model(seed=0), hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)), mode)
    sgd.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    before = [m.numpy().copy() for m in sgd.optimizer.momentums]
    callback = hvd.LearningRateScheduleCallback(0.1, multiplier=0.25, momentum_correction=True)
    callback.set_model(sgd)
    callback.on_train_begin()
    callback.on_epoch_begin(0)
    callback.on_train_batch_begin(0)
    c.check(abs(float(sgd.optimizer.learning_rate.numpy()) - 0.025) < 1e-7, "schedule set lr 0.025")
    close_weights(c, [m.numpy() for m in sgd.optimizer.momentums], [b * 0.25 for b in before], "momentum buffers",
                  tol=1e-7)  # the ratio of the float32 rates actually applied


def load_model_round_trip(c: Checks, mode: str) -> None:
    rank = hvd.rank()
    model = compiled(build_model(seed=rank), hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)), mode)
    x, y = rank_data(rank)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.BroadcastGlobalVariablesCallback(0)])
    path = SCRATCH[0] / f"model-{mode}-rank{rank}.keras"
    model.save(path)
    plain = keras.saving.load_model(path)
    c.check(type(plain.optimizer) is keras.optimizers.SGD and not is_distributed(plain.optimizer),
            f"plain Keras loads {type(plain.optimizer)}")
    loaded = hvd.load_model(path)
    c.check(is_distributed(loaded.optimizer) and isinstance(loaded.optimizer, keras.optimizers.SGD),
            f"hvd.load_model gives {type(loaded.optimizer).__mro__[:2]}")
    c.check(int(loaded.optimizer.iterations.numpy()) == STEPS, "loaded optimizer keeps its iterations")
    close_weights(c, [m.numpy() for m in loaded.optimizer.momentums], [m.numpy() for m in model.optimizer.momentums],
                  "loaded momentum buffers", tol=0)
    loaded.compile(optimizer=loaded.optimizer, loss="mse", run_eagerly=(mode == "eager"))
    # Ranks train on different data; equal weights afterwards show the gradients were averaged.
    loaded.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    same_on_all_ranks(c, loaded.get_weights(), "after loading")
    close_weights(c, loaded.get_weights(), model.get_weights(), "loaded model trains like the original")


# ---- local layers, SyncBatchNormalization ----------------------------------------------------------

def local_layers(c: Checks, mode: str) -> None:
    """PartialDistributedGradientTape and PartialDistributedOptimizer reduce the shared layer's
    gradients and keep the local layer's, divided by size() (Horovod's scale_local_gradients);
    BroadcastGlobalVariablesCallback(local_variables=) leaves those variables alone."""
    rank, size = hvd.rank(), hvd.size()
    model = build_model(seed=0)
    shared, local = model.layers
    x, y = (tf.constant(a[:BATCH]) for a in rank_data(rank))

    def gradients(wrap: Any) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        return wrap(tape).gradient(loss, model.trainable_variables)

    own = [g.numpy() for g in gradients(lambda t: t)]
    everyone = hvd.allgather_object(own)
    n_shared = len(shared.trainable_weights)
    want = [np.mean([g[i] for g in everyone], axis=0) for i in range(n_shared)] + [g / size for g in own[n_shared:]]
    partial = (tf.function(gradients) if mode == "graph" else gradients)(
        lambda t: hvd_tf.PartialDistributedGradientTape(t, local_layers=[local]))
    close_weights(c, [g.numpy() for g in partial], want, "PartialDistributedGradientTape")
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    split = hvd_tf.PartialDistributedGradientTape(tape, local_layers=[local])
    local_pairs, global_pairs = split.get_local_and_global_gradients(loss, model.trainable_variables)
    c.check([v.path for v, _ in local_pairs] == [v.path for v in local.trainable_weights] and
            [v.path for v, _ in global_pairs] == [v.path for v in shared.trainable_weights],
            "get_local_and_global_gradients pairs each variable with its side")
    close_weights(c, [g.numpy() for _, g in global_pairs + local_pairs], want,
                  "get_local_and_global_gradients (global pairs, then local)")

    before = [w.copy() for w in model.get_weights()]
    optimizer = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=local)
    optimizer.build(model.trainable_variables)
    apply = lambda: optimizer.apply(own, model.trainable_variables)  # noqa: E731
    (tf.function(apply) if mode == "graph" else apply)()
    steps = [b - a for a, b in zip(model.get_weights(), before)]
    close_weights(c, steps, want, "PartialDistributedOptimizer")
    # Horovod's _compute_gradients: the same reduced gradients, which apply_gradients then uses as they are.
    for variable, value in zip(model.trainable_variables, before):
        variable.assign(value)

    def compute_and_apply() -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        # Nested, as Keras 2 took var_list, and with Keras 2's apply_gradients arguments, as Horovod's tests pass.
        variables = model.trainable_variables
        pairs = optimizer._compute_gradients(loss, [variables[:2], variables[2:]], tape=tape)
        optimizer.apply_gradients(pairs, name="step", experimental_aggregate_gradients=True)
        return [g for g, _ in pairs]
    reduced = (tf.function(compute_and_apply) if mode == "graph" else compute_and_apply)()
    close_weights(c, [g.numpy() for g in reduced], want, "PartialDistributedOptimizer._compute_gradients")
    steps = [b - a for a, b in zip(model.get_weights(), before)]
    close_weights(c, steps, want, "apply_gradients after _compute_gradients reduces once")

    own_values = [w.copy() for w in model.get_weights()]
    for variable in model.variables:
        variable.assign(variable + rank)  # ranks now differ everywhere
    callback = hvd.BroadcastGlobalVariablesCallback(0, local_variables=local.trainable_weights)
    callback.set_model(model)
    callback.on_train_begin()
    got = model.get_weights()
    close_weights(c, got[:n_shared], own_values[:n_shared], "broadcast shared variables")
    close_weights(c, got[n_shared:], [w + rank for w in own_values[n_shared:]], "local variables keep their values")


def sync_batch_norm(c: Checks, mode: str) -> None:
    """In training, SyncBatchNormalization normalizes with the statistics of every rank's batch."""
    rank, size = hvd.rank(), hvd.size()
    batches = [np.random.default_rng(r).normal(r, r + 1.0, size=(6, 3)) for r in range(size)]
    layer = hvd.SyncBatchNormalization(dtype="float64")
    call = (lambda t: layer(t, training=True))
    got = (tf.function(call) if mode == "graph" else call)(tf.constant(batches[rank]))
    everything = np.concatenate(batches)
    want = (batches[rank] - everything.mean(axis=0)) / np.sqrt(everything.var(axis=0) + layer.epsilon)
    close_weights(c, [np.asarray(got)], [want], "normalized with the global batch's statistics", tol=1e-8)


def keras_value_ops(c: Checks, mode: str) -> None:
    """collective.keras's allreduce, allgather, broadcast and reducescatter take Horovod Keras's
    signatures (name second, positionally) and plain values."""
    rank, size = hvd.rank(), hvd.size()

    def ops() -> list[tf.Tensor]:
        return [hvd.allreduce(np.array([rank + 1.0]), "kv_sum", op=hvd.Sum),
                hvd.allreduce([float(rank)], "kv_average"),
                hvd.allgather(np.full((1, 2), rank), "kv_gather"),
                hvd.broadcast(np.array([rank]), 0, "kv_broadcast"),
                hvd.reducescatter(np.ones((2 * size, 1)) * (rank + 1), "kv_scatter", hvd.Sum)]
    got = [np.asarray(t) for t in (tf.function(ops) if mode == "graph" else ops)()]
    close_weights(c, got, [np.array([size * (size + 1) / 2]), np.array([(size - 1) / 2]),
                           np.stack([np.full(2, r) for r in range(size)]), np.array([0]),
                           np.full((2, 1), size * (size + 1) / 2)], "Keras value ops")


def bad_input(c: Checks, mode: str) -> None:
    c.raises(ValueError, "Keras 3 optimizer", lambda: hvd.DistributedOptimizer(tf.Module()), "not an optimizer")
    c.raises(ValueError, "op=Average or op=Sum",
             lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(), op=hvd.Min), "op=Min")
    c.raises(ValueError, "backward_passes_per_step",
             lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(), backward_passes_per_step=0), "0 passes")
    wrapped = hvd.DistributedOptimizer(keras.optimizers.SGD())
    c.raises(ValueError, "already", lambda: hvd.DistributedOptimizer(wrapped), "wrapping twice")
    c.raises(ValueError, "initial_lr", lambda: hvd.LearningRateWarmupCallback(None), "warm-up without initial_lr")
    c.raises(ValueError, "Keras or tf.compat.v1.train optimizer", lambda: hvd_tf.DistributedOptimizer(tf.Module()),
             "collective.tensorflow.DistributedOptimizer of a non-optimizer")
    for wrap in (lambda g: hvd.DistributedOptimizer(keras.optimizers.SGD(), groups=g),
                 lambda g: hvd_tf.DistributedGradientTape(tf.GradientTape(), groups=g)):
        c.raises(ValueError, "groups should be", lambda: wrap(-1), "groups=-1")
        wrap(2)  # Horovod's grouping argument is accepted
        wrap([[tf.Variable(1.0)]])
    c.check(is_distributed(hvd_tf.DistributedOptimizer(keras.optimizers.SGD())),
            "collective.tensorflow.DistributedOptimizer of a Keras optimizer is collective.keras's")


def main() -> None:
    SCRATCH.append(Path(sys.argv[1]))
    hvd.init()
    run_cases([tape_matches_single_process, tape_overlaps_backward, tape_shape_mismatch, tape_sparse_gradients,
               tape_options,
               fit_matches_single_process,
               fit_backward_passes_per_step, learning_rate_warmup, learning_rate_schedule,
               load_model_round_trip, local_layers, sync_batch_norm, keras_value_ops])
    run_cases([bad_input], modes=("eager",))
    hvd.shutdown()


if __name__ == "__main__":
    main()
