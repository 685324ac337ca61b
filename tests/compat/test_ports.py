"""Horovod-style Spark scripts (tests/compat/scripts/), ported by changing their import lines only.

Each script is written as a Horovod 0.28 user writes one (``import horovod.spark.torch as hvd``,
``from horovod.spark.common.store import Store``, ...). A test reads it, rewrites its imports with the one
mapping of porting.py (horovod.spark -> spark_hvd, horovod.torch -> collective.torch,
horovod.tensorflow.keras -> collective.keras, horovod.tensorflow -> collective.tensorflow), checks that
every changed line is an import line, and runs the port in a fresh Python process, as a user would: it
builds its own local[2] SparkSession, fits on two ranks, transforms, saves and loads, and prints its
results as one JSON line.

The test then trains the same model in this process, single-process and without Spark, with Horovod's
semantics (port_references.py): two ranks averaging the gradients of equal batches take the step one
process takes on the union of those batches with the learning rate multiplied by the number of ranks.
The rows are those the fit trained on, read back from its Store, sharded as spark-hvd's reader shards
them (rank r: the r-th contiguous half of the split; no shuffle), for Horovod's whole steps per epoch.
"""

from __future__ import annotations

import importlib.util
import re
import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from port_references import (
    RANKS,
    assert_split_of,
    dealt_shares,
    materialized_rows,
    max_weight_difference,
    scale_torch_learning_rate,
    torch_predictions,
    train_torch,
    union_batches,
    covering_steps,
    whole_steps,
)
from porting import PortError, assert_only_imports_changed, changed_lines, port_imports, run_port

pytest.importorskip("pyspark")

SCRIPTS = Path(__file__).resolve().parent / "scripts"
# A port starts a JVM and two ranks and fits for a few seconds on a quiet 2-core machine; the deadline
# allows for machines shared with other test runs. A port that hangs is killed with its processes.
PORT_TIMEOUT_S = 420.0
# float64 models: two ranks' averaged gradients and one process's union-batch gradient differ only in
# rounding (~1e-16 relative per step). Measured: weights within 2.3e-16 after two epochs of 40-odd
# steps; this leaves four orders of magnitude for other summation orders.
FLOAT64_TOLERANCE = 1e-12
# The Keras port trains in float32 (Keras's default floatx; spark-hvd's ranks feed floatx): the ranks'
# averaged gradients and the union batch's differ in float32 rounding (~1e-7 relative per step). Measured:
# weights within 1e-7 after two epochs, losses within 1e-7 relative; this leaves a hundredfold margin.
KERAS_TOLERANCE = 1e-5
# pytest's own deadline for a port test: the script's, plus this process's reference training and imports.
port_deadline = pytest.mark.timeout(PORT_TIMEOUT_S + 180)


@dataclass
class Port:
    results: dict[str, Any]
    output: str             # what the script printed, its ranks' lines included
    module: ModuleType      # the ported script imported under another name: its model, data and constants
    work_dir: Path


def run_ported(name: str, tmp_path: Path) -> Port:
    original = (SCRIPTS / f"{name}.py").read_text()
    ported = port_imports(original)
    assert_only_imports_changed(original, ported)
    script = tmp_path / f"{name}.py"
    script.write_text(ported)
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    run = run_port(script, work_dir, PORT_TIMEOUT_S)
    (work_dir / "output.txt").write_text(run.output)      # kept with the test's tmp_path, for a look after a failure
    assert run.returncode == 0 and run.results is not None, (
        f"the port of {name}.py failed (exit {run.returncode}); its output ends:\n{run.output[-8000:]}")
    return Port(run.results, run.output, _import_script(script), work_dir)


def _import_script(path: Path) -> ModuleType:
    """The port as a module (its ``if __name__ == '__main__'`` part does not run)."""
    spec = importlib.util.spec_from_file_location(f"compat_port_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _digits(first: int, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows [first, stop) of the digits as the scripts scale them: pixels / 16 (exact in binary) and labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.data[first:stop] / 16.0, digits.target[first:stop].astype(np.float64)


def _by_id(predictions: list[list[Any]], first_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(row positions in the test set, prediction rows) from the scripts' [id, values] pairs."""
    return (np.array([row_id - first_id for row_id, _ in predictions]),
            np.array([values for _, values in predictions], dtype=np.float64))


def _torch_state(model: Any) -> dict[str, np.ndarray]:
    return {name: value.detach().numpy() for name, value in model.state_dict().items()}


def _nll_on_class_floats(output: Any, target: Any) -> Any:
    """The scripts' loss, ``lambda input, target: F.nll_loss(input, target.long())``: Horovod hands the
    label over as floats, so the loss casts it."""
    import torch.nn.functional as F

    return F.nll_loss(output, target.long())


@dataclass
class TorchReference:
    model: Any
    step_losses: list[list[float]]      # per epoch, per step


def torch_estimator_reference(module: ModuleType, train: dict[str, np.ndarray], epochs: int) -> TorchReference:
    """What a two-rank TorchEstimator fit trains, in one process: the script's model and optimizer, the rate
    times the ranks, input_shapes [-1, 1, 8, 8], the union batches of the ranks' dealt shares."""
    import torch

    model, optimizer = module.build_model_and_optimizer()
    scale_torch_learning_rate(optimizer, RANKS)
    rows = len(train["label"])
    steps = whole_steps(rows, module.BATCH_SIZE)
    batches = union_batches(dealt_shares(rows, module.BATCH_SIZE, steps), module.BATCH_SIZE, steps)
    x, y = torch.from_numpy(train["features"]), torch.from_numpy(train["label"])
    losses = train_torch(model, optimizer, lambda b: _nll_on_class_floats(model(x[b].reshape(-1, 1, 8, 8)), y[b]),
                         batches, epochs)
    return TorchReference(model, losses)


def assert_torch_history(history: list[dict[str, Any]], reference: TorchReference, epochs: int) -> None:
    """Horovod's torch history: one {'epoch', 'train', 'validation'} per epoch; each train loss is the mean
    over the epoch's steps of the loss averaged over the ranks, i.e. of the union batch's loss."""
    assert [sorted(entry) for entry in history] == [["epoch", "train", "validation"]] * epochs, history
    assert [entry["epoch"] for entry in history] == list(range(epochs))
    for entry, losses in zip(history, reference.step_losses):
        assert sorted(entry["train"]) == ["all_metrics", "loss"] and entry["train"]["all_metrics"] == []
        assert entry["train"]["loss"] == pytest.approx(np.mean(losses), rel=FLOAT64_TOLERANCE)
        assert np.isfinite(entry["validation"]["loss"])


# --- the mapping itself ---------------------------------------------------------------------------------

def test_port_imports_rewrites_every_horovod_module_on_import_lines_only() -> None:
    original = textwrap.dedent("""\
        # import horovod.spark stays in a comment
        import horovod.spark as hvd_spark
        import horovod.spark.torch as hvd
        from horovod.spark.common.store import Store
        from horovod.tensorflow.keras.callbacks import BestModelCheckpoint
        from horovod.tensorflow import DistributedGradientTape
        import horovod_tools


        def train():
            import horovod.torch as hvd
            return "horovod.torch"
        """)
    ported = port_imports(original)
    assert ported == textwrap.dedent("""\
        # import horovod.spark stays in a comment
        import spark_hvd as hvd_spark
        import spark_hvd.torch as hvd
        from spark_hvd.common.store import Store
        from collective.keras.callbacks import BestModelCheckpoint
        from collective.tensorflow import DistributedGradientTape
        import horovod_tools


        def train():
            import collective.torch as hvd
            return "horovod.torch"
        """)
    assert [n for n, _, _ in changed_lines(original, ported)] == [2, 3, 4, 5, 6, 11]
    assert_only_imports_changed(original, ported)


def test_a_body_reference_to_horovod_cannot_be_ported_by_imports() -> None:
    # Horovod's docs write `import horovod.spark` then `horovod.spark.run(...)`; after the import becomes
    # `import spark_hvd`, the body still names horovod. The ports import under an alias instead.
    with pytest.raises(PortError, match=r"line 2 names horovod outside an import"):
        port_imports("import horovod.spark\nhorovod.spark.run(train, num_proc=2)\n")


def test_a_horovod_module_without_a_counterpart_is_refused() -> None:
    with pytest.raises(PortError, match=r"'horovod.mxnet' has no spark-hvd counterpart"):
        port_imports("import horovod.mxnet as hvd\n")


def test_the_diff_check_catches_a_change_beside_an_import() -> None:
    original = "import horovod.torch as hvd\nlr = 0.1\n"
    with pytest.raises(AssertionError, match="line 2 changed beyond its import"):
        assert_only_imports_changed(original, "import collective.torch as hvd\nlr = 0.2\n")
    with pytest.raises(AssertionError, match="line 1 changed beyond its import"):
        assert_only_imports_changed(original, "import collective.torch as hv\nlr = 0.1\n")


# --- the ports ------------------------------------------------------------------------------------------

@port_deadline
def test_run_port_trains_like_one_process_on_the_union_batches(tmp_path: Path) -> None:
    import torch
    import torch.nn.functional as F

    port = run_ported("run_torch_digits", tmp_path)
    m, results = port.module, port.results["results"]
    # spark_hvd.run returns every rank's result, in rank order.
    assert [(r["rank"], r["size"]) for r in results] == [(0, RANKS), (1, RANKS)]
    # DistributedOptimizer keeps the replicas identical, to the bit.
    assert results[0]["weights"] == results[1]["weights"]
    # Each rank's prints reach the driver's stdout, after prefix_output_with_timestamp's time.asctime()
    # and the rank (Horovod writes `[0]<stdout>:`, spark-hvd `[0]: `; a user reads either).
    for rank in range(RANKS):
        assert re.search(rf"^\w{{3}} \w{{3}} [ \d]\d \d\d:\d\d:\d\d \d{{4}}\[{rank}\][^:]*: ?rank {rank} epoch 0 loss ",
                         port.output, re.MULTILINE), f"no timestamped line of rank {rank} in:\n{port.output[-4000:]}"

    # The script's own sharding: rank r takes rows r, r + 2, ...; each step, its next BATCH_SIZE of them.
    x, y = _digits(0, m.TRAIN_ROWS)
    shards = [np.arange(m.TRAIN_ROWS)[rank::RANKS] for rank in range(RANKS)]
    batches = union_batches(shards, m.BATCH_SIZE, len(shards[0]) // m.BATCH_SIZE)
    model = m.make_model(0)            # broadcast_parameters gave every rank rank 0's initial weights
    optimizer = torch.optim.SGD(model.parameters(), lr=m.LEARNING_RATE * RANKS, momentum=m.MOMENTUM)
    features, labels = torch.from_numpy(x), torch.from_numpy(y).long()
    losses = train_torch(model, optimizer, lambda b: F.nll_loss(model(features[b]), labels[b]), batches, m.EPOCHS)

    assert max_weight_difference(_torch_state(model), results[0]["weights"]) < FLOAT64_TOLERANCE
    # Each rank's loss is its own half of the union batch; with equal halves their mean is the union's loss.
    ranks_mean = (np.array(results[0]["losses"]) + np.array(results[1]["losses"])) / RANKS
    np.testing.assert_allclose(ranks_mean, np.concatenate(losses), rtol=FLOAT64_TOLERANCE)


@port_deadline
def test_torch_estimator_port_trains_the_single_process_model(tmp_path: Path) -> None:
    port = run_ported("torch_estimator_digits", tmp_path)
    m, r = port.module, port.results
    rows = materialized_rows(port.work_dir)
    assert_split_of(rows, *_digits(0, m.TRAIN_ROWS))
    assert len(rows["val"]["label"]) == pytest.approx(0.1 * m.TRAIN_ROWS, abs=40)    # validation=0.1

    reference = torch_estimator_reference(m, rows["train"], m.EPOCHS)
    assert max_weight_difference(_torch_state(reference.model), r["weights"]) < FLOAT64_TOLERANCE
    test_x, test_y = _digits(m.TRAIN_ROWS)
    expected = torch_predictions(reference.model, test_x, [-1, 1, 8, 8])
    positions, got = _by_id(r["predictions"], m.TRAIN_ROWS)
    np.testing.assert_allclose(got, expected[positions], atol=FLOAT64_TOLERANCE)
    assert r["accuracy"] == pytest.approx(np.mean(expected.argmax(axis=1) == test_y))
    assert_torch_history(r["history"], reference, m.EPOCHS)

    # TorchModel.save / TorchModel.load keep the output column, the history, the predictions and the
    # optimizer with the user's learning rate (Horovod's estimators scale it on the ranks only).
    assert r["loaded_output_cols"] == ["label_prob"]
    assert r["loaded_predictions"] == r["predictions"]
    assert r["loaded_history"] == r["history"]
    assert r["loaded_learning_rate"] == m.LEARNING_RATE
    # Horovod's TorchModel.transform: a scalar label whose output holds several values per row (class
    # log-probabilities here) gets a VectorUDT column of DenseVectors, which its example then argmaxes.
    assert r["prediction_type"] == "vector", (
        f"prediction column is {r['prediction_type']}; Horovod's TorchModel gives a VectorUDT column here")
    assert r["prediction_value_type"] == "DenseVector"


@port_deadline
def test_keras_estimator_port_trains_the_single_process_model(tmp_path: Path) -> None:
    port = run_ported("keras_estimator_digits", tmp_path)
    m, r = port.module, port.results
    import tensorflow as tf
    from tensorflow import keras

    rows = materialized_rows(port.work_dir)
    x, labels = _digits(0, m.TRAIN_ROWS)
    assert_split_of(rows, x, np.eye(10)[labels.astype(int)], label="label_vec")     # OneHotEncoder's vectors
    train = rows["train"]

    # The script's model and optimizer, at the rate times the ranks, on the union batches; a plain
    # Keras training step (what model.fit runs on the TensorFlow backend).
    model, optimizer = m.build_model()
    config = optimizer.get_config()
    config["learning_rate"] = config["learning_rate"] * RANKS
    optimizer = type(optimizer).from_config(config)
    loss_fn = keras.losses.CategoricalCrossentropy()      # loss='categorical_crossentropy' in the script
    train_rows = len(train["label_vec"])
    # Horovod's KerasEstimator rounds an epoch up (its TorchEstimator rounds down), so the last share is
    # padded from the epoch's next pass.
    steps = covering_steps(train_rows, m.BATCH_SIZE)
    batches = union_batches(dealt_shares(train_rows, m.BATCH_SIZE, steps), m.BATCH_SIZE, steps)
    features = train["features"].reshape(-1, 8, 8, 1).astype(np.float32)
    targets = train["label_vec"].astype(np.float32)
    weights_after_epoch, epoch_losses = [], []
    for _ in range(m.EPOCHS):
        step_losses = []
        for batch in batches:
            with tf.GradientTape() as tape:
                loss = loss_fn(targets[batch], model(features[batch], training=True))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            step_losses.append(float(loss))
        epoch_losses.append(float(np.mean(step_losses)))
        weights_after_epoch.append([w.copy() for w in model.get_weights()])

    # Keras's history: a dict of lists, one value per epoch, averaged over the ranks.
    history = r["history"]
    assert sorted(history) == ["accuracy", "loss", "val_accuracy", "val_loss"], history
    assert all(len(values) == m.EPOCHS for values in history.values())
    np.testing.assert_allclose(history["loss"], epoch_losses, rtol=KERAS_TOLERANCE)
    # BestModelCheckpoint(monitor='val_loss'): the model returned is the one of the best epoch.
    best = int(np.argmin(history["val_loss"]))
    expected_weights = weights_after_epoch[best]
    assert len(r["weights"]) == len(expected_weights)
    difference = max(float(np.max(np.abs(np.asarray(a) - b))) for a, b in zip(r["weights"], expected_weights))
    assert difference < KERAS_TOLERANCE, f"weights differ from single-process training by {difference}"
    model.set_weights(expected_weights)
    test_x, test_y = _digits(m.TRAIN_ROWS)
    expected = model.predict_on_batch(test_x.reshape(-1, 8, 8, 1).astype(np.float32))
    positions, got = _by_id(r["predictions"], m.TRAIN_ROWS)
    np.testing.assert_allclose(got, expected[positions], atol=KERAS_TOLERANCE)

    assert r["loaded_output_cols"] == ["label_prob"]
    assert r["loaded_predictions"] == r["predictions"]
    assert r["loaded_history"] == history
    assert r["loaded_learning_rate"] == pytest.approx(m.LEARNING_RATE)     # unscaled, as Horovod returns it
    # A vector label (OneHotEncoder's) gives a VectorUDT prediction column, as in Horovod.
    assert r["prediction_type"] == "vector"


@port_deadline
def test_lightning_estimator_port_trains_the_single_process_model(tmp_path: Path) -> None:
    import torch

    port = run_ported("lightning_estimator_digits", tmp_path)
    m, r = port.module, port.results
    assert r["min_pl_version"] == m.MIN_PL_VERSION
    rows = materialized_rows(port.work_dir)
    assert_split_of(rows, *_digits(0, m.TRAIN_ROWS))
    train = rows["train"]

    # The script's LightningModule trained by its own training_step and configure_optimizers, rate times
    # the ranks (Horovod's Lightning strategy scales it), on the union batches.
    model = m.build_model()
    optimizer = scale_torch_learning_rate(model.configure_optimizers(), RANKS)
    train_rows = len(train["label"])
    steps = whole_steps(train_rows, m.BATCH_SIZE)
    batches = union_batches(dealt_shares(train_rows, m.BATCH_SIZE, steps), m.BATCH_SIZE, steps)
    x, y = torch.from_numpy(train["features"]), torch.from_numpy(train["label"])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*self.log.*")      # no Trainer here to log to
        train_torch(model, optimizer, lambda b: model.training_step({"features": x[b], "label": y[b]}, 0),
                    batches, m.EPOCHS)

    assert max_weight_difference(_torch_state(model), r["weights"]) < FLOAT64_TOLERANCE
    test_x, test_y = _digits(m.TRAIN_ROWS)
    expected = torch_predictions(model, test_x, [-1, 1, 8, 8])
    positions, got = _by_id(r["predictions"], m.TRAIN_ROWS)
    np.testing.assert_allclose(got, expected[positions], atol=FLOAT64_TOLERANCE)
    assert r["accuracy"] == pytest.approx(np.mean(expected.argmax(axis=1) == test_y))
    # Horovod's Lightning history: the metrics the trainer logged last.
    assert {"train_loss", "val_loss"} <= set(r["history"]), r["history"]
    assert r["loaded_output_cols"] == ["label_prob"]
    assert r["loaded_predictions"] == r["predictions"]
    assert r["prediction_type"] == "vector", (
        f"prediction column is {r['prediction_type']}; Horovod's Lightning TorchModel gives a VectorUDT column here")


@port_deadline
def test_pipeline_and_prepared_data_ports_train_the_single_process_model(tmp_path: Path) -> None:
    port = run_ported("torch_pipeline_prepared_digits", tmp_path)
    m, r = port.module, port.results
    test_x, _ = _digits(m.TRAIN_ROWS)
    assert r["loaded_stage_types"] == ["VectorAssembler", "TorchEstimator"]

    references = {}
    for name in ("pipeline", "prepared"):       # each fit materialised its rows under its own Store
        rows = materialized_rows(port.work_dir / f"{name}_store")
        assert_split_of(rows, *_digits(0, m.TRAIN_ROWS))
        references[name] = torch_estimator_reference(m, rows["train"], m.EPOCHS)
        difference = max_weight_difference(_torch_state(references[name].model), r[f"{name}_weights"])
        assert difference < FLOAT64_TOLERANCE, f"{name}: weights differ from single-process training by {difference}"
        assert_torch_history(r[f"{name}_history"], references[name], m.EPOCHS)
    # The PipelineModel assembles the test rows' pixels and predicts with the trained model.
    expected = torch_predictions(references["pipeline"].model, test_x, [-1, 1, 8, 8])
    positions, got = _by_id(r["pipeline_predictions"], m.TRAIN_ROWS)
    np.testing.assert_allclose(got, expected[positions], atol=FLOAT64_TOLERANCE)
