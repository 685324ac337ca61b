"""Before launch, on the driver: a sample of the training rows goes through the model and through Keras's
own loss and metrics, exactly as ``model.fit`` on the ranks will take it.

Keras decides what it accepts (its compiled loss squeezes or expands a label to the output's rank, so a
scalar 0/1 label fits a ``(B, 1)`` sigmoid output), by ``compute_loss`` on a compiled copy of the model.
One thing Keras accepts silently is refused: a label that the loss merely broadcasts against a larger
output (a scalar label against 3 outputs under MSE). It is found by asking the loss again with the
label broadcast explicitly: a loss that reads class indices fails or gives another value, a loss
that broadcasts gives the same one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from spark_hvd.errors import InputError
from spark_hvd.keras.batch_arrays import (
    ArrayShapes,
    as_outputs,
    column_array,
    model_input_shapes,
    model_inputs,
    model_targets,
    resolve_label_shapes,
)


@dataclass(frozen=True)
class CompileArgs:
    loss: Any
    loss_weights: Any
    metrics: list[Any]
    custom_objects: dict[str, Any]


@dataclass(frozen=True)
class SampleResult:
    shapes: ArrayShapes
    output_shapes: list[tuple[int, ...]]     # per row, one per label column


def check_sample(model: Any, model_bytes: bytes, batch: dict[str, np.ndarray], feature_cols: Sequence[str],
                 label_cols: Sequence[str], sample_weight_col: str | None,
                 label_shapes: Sequence[Sequence[Any]] | None, compile_args: CompileArgs) -> SampleResult:
    """``batch`` is the sample after transformation_fn. Raises InputError naming columns and shapes."""
    import keras

    floatx = keras.config.floatx()
    missing = [c for c in [*feature_cols, *label_cols, *filter(None, [sample_weight_col])] if c not in batch]
    if missing:
        raise InputError(f"column(s) {missing} are missing from the rows (after transformation_fn); they hold "
                         f"{sorted(batch)}")
    features = [column_array(batch[c], floatx) for c in feature_cols]
    labels = [column_array(batch[c], floatx) for c in label_cols]
    weights = column_array(batch[sample_weight_col], floatx) if sample_weight_col else None
    input_shapes = model_input_shapes(model, len(features))
    x = model_inputs(features, input_shapes)
    try:
        outputs = as_outputs(model(x, training=False))
    except Exception as e:
        given = ", ".join(f"{c}: {f.shape[1:]}" for c, f in zip(feature_cols, features))
        wanted = ", ".join(str(s) for s in input_shapes)
        raise InputError(f"the model cannot take the feature columns (per-row shapes {given}; the model's inputs "
                         f"want {wanted}): {type(e).__name__}: {e}") from e
    label_rows = resolve_label_shapes(label_shapes, labels, outputs, label_cols)
    y = model_targets(labels, label_rows)
    compiled = _compiled_copy(model_bytes, compile_args)
    y_pred = outputs[0] if len(outputs) == 1 else list(outputs)
    value = _loss(compiled, x, y, y_pred, weights, label_cols)
    if label_shapes is None:
        for i in range(len(labels)):
            if label_rows[i] is None:
                _refuse_broadcast(compiled, x, labels, label_rows, i, y_pred, weights, value, label_cols)
    try:
        compiled.compute_metrics(x, y, y_pred, sample_weight=weights)
    except Exception as e:
        raise InputError(f"the metrics {compile_args.metrics} cannot compare the model's outputs with label "
                         f"column(s) {list(label_cols)}: {type(e).__name__}: {e}") from e
    return SampleResult(ArrayShapes(tuple(input_shapes), tuple(label_rows)),
                        [tuple(int(d) for d in output.shape[1:]) for output in outputs])


def _compiled_copy(model_bytes: bytes, args: CompileArgs) -> Any:
    """The model as the ranks load it, compiled as they compile it (the optimizer aside). The user's own
    model stays uncompiled, and their loss and metric objects untouched (compiling builds metrics)."""
    import cloudpickle

    from spark_hvd.keras.saving import loading_objects, model_from_bytes

    args = cloudpickle.loads(cloudpickle.dumps(args))
    copy = model_from_bytes(model_bytes, loading_objects(args.custom_objects, args.loss, args.metrics),
                            compile=False)
    try:
        copy.compile(optimizer="sgd", loss=args.loss, loss_weights=args.loss_weights,
                     metrics=list(args.metrics) or None)
    except Exception as e:
        raise InputError(f"Keras cannot compile the model with loss={args.loss!r}, loss_weights="
                         f"{args.loss_weights!r}, metrics={args.metrics!r}: {type(e).__name__}: {e}") from e
    return copy


def _loss(compiled: Any, x: Any, y: Any, y_pred: Any, weights: Any, label_cols: Sequence[str]) -> float:
    try:
        return float(np.asarray(compiled.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=weights,
                                                      training=False)))
    except Exception as e:
        raise InputError(f"the loss cannot compare the model's outputs with label column(s) {list(label_cols)}: "
                         f"{type(e).__name__}: {e}") from e


def _refuse_broadcast(compiled: Any, x: Any, labels: list[np.ndarray], label_rows: Sequence[Any], i: int,
                      y_pred: Any, weights: Any, value: float, label_cols: Sequence[str]) -> None:
    output_shape = tuple(np.shape(y_pred if len(labels) == 1 else y_pred[i]))
    spread = _broadcast(labels[i], output_shape)
    if spread is None:
        return
    probe = list(labels)
    probe[i] = spread
    try:
        again = float(np.asarray(compiled.compute_loss(
            x=x, y=model_targets(probe, [None if j == i else row for j, row in enumerate(label_rows)]),
            y_pred=y_pred, sample_weight=weights, training=False)))
    except Exception:   # noqa: BLE001 - the loss refuses a label of the output's shape: it reads class indices
        return
    if np.isclose(again, value, rtol=1e-5, atol=1e-7):
        raise InputError(
            f"label column {label_cols[i]!r} has shape {tuple(labels[i].shape[1:])} per row but the model's "
            f"output for it has shape {output_shape[1:]} per row: the loss would only broadcast the label "
            f"against the output. Give a label with as many values per row as the output, or, if the loss reads "
            f"class indices, say so with label_shapes")


def _broadcast(label: np.ndarray, output_shape: tuple[int, ...]) -> np.ndarray | None:
    """The label spread over the output's shape, as the loss's broadcasting would; None if it cannot be."""
    row, out_row = label.shape[1:], output_shape[1:]
    if len(row) > len(out_row):
        return None
    expanded = label.reshape(label.shape + (1,) * (len(out_row) - len(row)))
    try:
        return np.ascontiguousarray(np.broadcast_to(expanded, (label.shape[0], *out_row)))
    except ValueError:
        return None
