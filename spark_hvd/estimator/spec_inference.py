"""Input and output specs of a model that no fit described (a Horovod-style ``TorchModel(model=...)``),
read off the DataFrame's schema, its first rows and one prediction on them (driver side)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from spark_hvd.data.columns import NUMERIC_TYPES, VECTOR_DTYPE, column_ref, is_vector_type
from spark_hvd.errors import InputError
from spark_hvd.estimator.batch_transform import InputSpec, OutputSpec

_SAMPLE_ROWS = 2


def infer_specs(df: Any, feature_cols: Sequence[str], label_cols: Sequence[str], output_cols: Sequence[str],
                predict_factory: Callable[[], Callable[[list[np.ndarray]], list[np.ndarray]]]
                ) -> tuple[list[InputSpec], list[OutputSpec]]:
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    if not feature_cols:
        raise InputError("transform: this model has no feature_columns; construct it with feature_columns=[...]")
    fields = {f.name: f for f in df.schema.fields}
    missing = [c for c in feature_cols if c not in fields]
    if missing:
        raise InputError(f"transform: the DataFrame lacks feature column(s) {missing}; it has {sorted(fields)}")
    selected = [vector_to_array(F.col(column_ref(c)), "float64").alias(c) if is_vector_type(fields[c].dataType)
                else F.col(column_ref(c)) for c in feature_cols]
    rows = df.select(*selected).limit(_SAMPLE_ROWS).collect()
    if not rows:
        raise InputError("transform: the DataFrame is empty, so the model's input shapes cannot be read off it")
    inputs = [_input_spec(c, fields[c].dataType, [row[i] for row in rows]) for i, c in enumerate(feature_cols)]
    sample = [np.asarray([row[i] for row in rows], dtype=spec.dtype).reshape((len(rows), *spec.shape))
              for i, spec in enumerate(inputs)]
    outputs = predict_factory()(sample)
    if len(outputs) != len(output_cols):
        raise InputError(f"transform: the model returns {len(outputs)} output(s) for output columns {list(output_cols)}")
    specs = []
    for column, output, label in zip(output_cols, outputs, list(label_cols) or [None] * len(outputs)):
        kind, dtype = _label_type(fields.get(label) if label else None)
        specs.append(OutputSpec(column, tuple(np.asarray(output).shape[1:]), kind, dtype))
    return inputs, specs


def _input_spec(name: str, data_type: Any, values: list[Any]) -> InputSpec:
    if is_vector_type(data_type):
        return InputSpec(name, VECTOR_DTYPE, (len(values[0]),))
    type_name = data_type.typeName()
    if type_name in NUMERIC_TYPES:
        return InputSpec(name, NUMERIC_TYPES[type_name], ())
    if type_name == "array" and data_type.elementType.typeName() in NUMERIC_TYPES:
        return InputSpec(name, NUMERIC_TYPES[data_type.elementType.typeName()], (len(values[0]),))
    raise InputError(f"transform: feature column {name!r} has type {data_type.simpleString()}, which cannot be fed "
                     "to a model")


def _label_type(field: Any) -> tuple[str, str]:
    """(kind, dtype) of a label column present in the DataFrame; unknown ("", float64) otherwise."""
    if field is None:
        return "", "float64"
    if is_vector_type(field.dataType):
        return "vector", VECTOR_DTYPE
    type_name = field.dataType.typeName()
    if type_name in NUMERIC_TYPES:
        return "scalar", NUMERIC_TYPES[type_name]
    return "array", "float64"
