"""Training on process sets with collective.tensorflow and collective.keras: the even and the odd ranks
form two disjoint sets that train at the same time, each against one process trained on its own
members' data. Cases report RESULT {"case", "mode", "failures"}; tests/tensorflow/test_tf_process_sets.py
checks them."""

from __future__ import annotations

from typing import Any

from tf_checks import Checks, run_cases  # first: it quiets TensorFlow's import

import keras
import numpy as np
import tensorflow as tf

import collective.keras as hvd
import collective.tensorflow as hvd_tf
from tf_train import BATCH, EPOCHS, STEPS, build_model, close_weights, combined, compiled, rank_data

SETS: dict[str, Any] = {}  # "mine" (this rank's set), "other", "members" (mine's ranks)


def set_weights_agree(c: Checks, weights: list[np.ndarray], what: str) -> None:
    """Every member of this rank's set holds the same weights (gathered over the set only)."""
    flat = np.concatenate([w.ravel() for w in weights])[None, :]
    everyone = hvd_tf.allgather(tf.constant(flat), process_set=SETS["mine"]).numpy()
    c.check(bool(np.all(everyone == everyone[0])), f"{what}: weights differ between the set's ranks")


def tape_trains_per_set(c: Checks, mode: str) -> None:
    """DistributedGradientTape(process_set=) averages over the set only: each set's model follows one
    process trained on its members' combined batches."""
    rank, members = hvd.rank(), SETS["members"]
    model, reference = build_model(seed=0), build_model(seed=0)
    lr = 0.1

    def step(model: keras.Model, x: tf.Tensor, y: tf.Tensor, distributed: bool) -> None:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        if distributed:
            tape = hvd_tf.DistributedGradientTape(tape, process_set=SETS["mine"])
        for var, grad in zip(model.trainable_variables, tape.gradient(loss, model.trainable_variables)):
            var.assign_sub(lr * grad)

    dist_step = tf.function(step) if mode == "graph" else step
    x, y = rank_data(rank)
    cx, cy = combined(BATCH, members)
    n = len(members)
    for k in range(STEPS):
        dist_step(model, x[k * BATCH:(k + 1) * BATCH], y[k * BATCH:(k + 1) * BATCH], True)
        step(reference, cx[k * n * BATCH:(k + 1) * n * BATCH], cy[k * n * BATCH:(k + 1) * n * BATCH], False)
    set_weights_agree(c, model.get_weights(), "tape")
    close_weights(c, model.get_weights(), reference.get_weights(), "tape on the set")


def tape_options_per_set(c: Checks, mode: str) -> None:
    """gradient_predivide_factor divides by the set's size, op=Sum sums over the set, and
    PartialDistributedGradientTape scales local gradients by the set's size."""
    rank, members = hvd.rank(), SETS["members"]
    w = tf.Variable(np.ones(3))
    k = tf.constant([1.0, 2.0, 3.0], tf.float64)
    mean_grad = np.mean([(r + 1) * k.numpy() for r in members], axis=0)

    def grads(**options: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * (rank + 1) * k)
        return hvd_tf.DistributedGradientTape(tape, process_set=SETS["mine"], **options).gradient(loss, [w])[0]
    run = tf.function(grads) if mode == "graph" else grads
    c.close(run(gradient_predivide_factor=2.0), mean_grad, "gradient_predivide_factor=2 on the set")
    c.close(run(op=hvd.Sum), mean_grad * len(members), "op=Sum on the set")

    table = tf.Variable(np.zeros((4, 2)))

    def sparse() -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.embedding_lookup(table, [rank % 4]) * (rank + 1.0))
        grad = hvd_tf.DistributedGradientTape(tape, process_set=SETS["mine"]).gradient(loss, [table])[0]
        return tf.convert_to_tensor(grad)  # the members' IndexedSlices rows, gathered and averaged
    want = np.zeros((4, 2))
    for member in members:
        want[member % 4] += (member + 1.0) / len(members)
    c.close((tf.function(sparse) if mode == "graph" else sparse)(), want, "sparse gradient on the set")

    model = build_model(seed=0)
    shared, local = model.layers
    x, y = (tf.constant(a[:BATCH]) for a in rank_data(rank))

    def partial() -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        own = tape.gradient(loss, model.trainable_variables)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        wrapped = hvd_tf.PartialDistributedGradientTape(tape, process_set=SETS["mine"], local_layers=[local])
        return own + wrapped.gradient(loss, model.trainable_variables)
    got = (tf.function(partial) if mode == "graph" else partial)()
    count = len(model.trainable_variables)
    own, reduced = [g.numpy() for g in got[:count]], [g.numpy() for g in got[count:]]
    n_shared = len(shared.trainable_weights)
    gathered = [hvd_tf.allgather(tf.constant(g[None]), process_set=SETS["mine"]).numpy() for g in own[:n_shared]]
    want = [g.mean(axis=0) for g in gathered] + [g / len(members) for g in own[n_shared:]]
    close_weights(c, reduced, want, "PartialDistributedGradientTape on the set")


def fit_trains_per_set(c: Checks, mode: str) -> None:
    """Keras model.fit with DistributedOptimizer(process_set=) follows one process fitted on the set's
    combined data; PartialDistributedOptimizer takes process_set= too."""
    rank, members = hvd.rank(), SETS["members"]
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9), process_set=SETS["mine"])
    model = compiled(build_model(seed=0), optimizer, mode)
    x, y = rank_data(rank)
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    reference = compiled(build_model(seed=0), keras.optimizers.SGD(0.05, momentum=0.9), mode)
    cx, cy = combined(BATCH, members)
    reference.fit(cx, cy, batch_size=len(members) * BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    set_weights_agree(c, model.get_weights(), "fit")
    close_weights(c, model.get_weights(), reference.get_weights(), "fit on the set")

    model = build_model(seed=0)
    shared, local = model.layers
    partial = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), process_set=SETS["mine"], local_layers=local)
    partial.build(model.trainable_variables)
    ones = [np.full(v.shape, float(rank + 1)) for v in model.trainable_variables]
    before = [w.copy() for w in model.get_weights()]
    apply = lambda: partial.apply(ones, model.trainable_variables)  # noqa: E731
    (tf.function(apply) if mode == "graph" else apply)()
    mean = np.mean([r + 1.0 for r in members])
    n_shared = len(shared.trainable_weights)
    want = [np.full(g.shape, mean) for g in ones[:n_shared]] + [g / len(members) for g in ones[n_shared:]]
    close_weights(c, [b - a for a, b in zip(model.get_weights(), before)], want, "PartialDistributedOptimizer")


def tf1_optimizer_per_set(c: Checks, mode: str) -> None:
    """The TF1 DistributedOptimizer(process_set=) in a Session: one SGD step (rate 1) on
    sum(w * (rank + 1)) moves w by the mean of rank + 1 over the set."""
    rank, members = hvd.rank(), SETS["members"]
    with tf.Graph().as_default():
        weight = tf.compat.v1.Variable(np.zeros(2))
        optimizer = hvd_tf.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                                process_set=SETS["mine"])
        train = optimizer.minimize(tf.reduce_sum(weight * (rank + 1.0)), var_list=[weight])
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(train)
            got = session.run(weight)
    c.close(got, -np.full(2, np.mean([r + 1.0 for r in members])), "TF1 optimizer on the set")


def outside_the_set(c: Checks, mode: str) -> None:
    """A rank outside the set keeps its local gradients (Horovod's rule); a set never added, or not a
    ProcessSet at all, is a clear error."""
    rank = hvd.rank()
    w = tf.Variable(np.ones(2))

    def grads(process_set: Any) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * (rank + 1.0))
        return hvd_tf.DistributedGradientTape(tape, process_set=process_set).gradient(loss, [w])[0]
    run = tf.function(grads) if mode == "graph" else grads
    c.close(run(SETS["other"]), np.full(2, rank + 1.0), "gradient on a set without this rank")
    c.raises(ValueError, "has not been added", lambda: run(hvd.ProcessSet([0])), "a set never added")
    c.raises(ValueError, "process_set must be a ProcessSet",
             lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(), process_set=[0, 1]), "a list as process_set")


def main() -> None:
    hvd.init()
    size = hvd.size()
    evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(size) if r % 2 == 1])
    mine, other = (evens, odds) if hvd.rank() % 2 == 0 else (odds, evens)
    SETS.update(mine=mine, other=other, members=list(mine.ranks))
    run_cases([tape_trains_per_set, tape_options_per_set, fit_trains_per_set, outside_the_set])
    run_cases([tf1_optimizer_per_set], modes=("eager",))
    hvd.remove_process_set(odds)
    hvd.remove_process_set(evens)
    hvd.shutdown()


if __name__ == "__main__":
    main()
