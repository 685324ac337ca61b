"""Batched prediction over a DataFrame: one ``mapInArrow`` pass, whole Arrow batches at a time.

The framework supplies ``predict_factory``: a picklable zero-argument callable, called once per
partition on the executor, that returns ``predict(features: list[np.ndarray]) -> list[np.ndarray]``
(one array per output, rows first). Vector columns are turned into arrays by Spark first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from spark_hvd.errors import InputError

_TEMP_PREFIX = "__shvd_input_"


@dataclass(frozen=True)
class InputSpec:
    column: str
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class OutputSpec:
    column: str
    shape: tuple[int, ...]      # per row; () is a scalar


def batched_transform(df: Any, inputs: Sequence[InputSpec], outputs: Sequence[OutputSpec],
                      predict_factory: Callable[[], Callable[[list[np.ndarray]], list[np.ndarray]]],
                      batch_rows: int) -> Any:
    from pyspark.ml.functions import vector_to_array
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql.types import ArrayType, DoubleType, StructField, StructType

    fields = {f.name: f for f in df.schema.fields}
    missing = [spec.column for spec in inputs if spec.column not in fields]
    if missing:
        raise InputError(f"transform: the DataFrame lacks feature column(s) {missing}; it has {sorted(fields)}")
    clashing = [spec.column for spec in outputs if spec.column in fields]
    if clashing:
        raise InputError(f"transform: output column(s) {clashing} already exist in the DataFrame; "
                         "choose other names with setOutputCols")
    prepared, read_as = df, []
    for i, spec in enumerate(inputs):
        if isinstance(fields[spec.column].dataType, VectorUDT):
            temp = f"{_TEMP_PREFIX}{i}"
            prepared = prepared.withColumn(temp, vector_to_array(spec.column, "float64"))
            read_as.append(temp)
        else:
            read_as.append(spec.column)
    temps = [name for name in read_as if name.startswith(_TEMP_PREFIX)]
    out_fields = [StructField(spec.column, DoubleType() if spec.shape == () else ArrayType(DoubleType()))
                  for spec in outputs]
    schema = StructType(list(df.schema.fields) + out_fields)
    predictor = _PartitionPredictor(list(inputs), read_as, list(outputs), temps, predict_factory, batch_rows)
    return prepared.mapInArrow(predictor, schema)


class _PartitionPredictor:
    def __init__(self, inputs: list[InputSpec], read_as: list[str], outputs: list[OutputSpec], temps: list[str],
                 predict_factory: Callable[[], Any], batch_rows: int) -> None:
        self.inputs, self.read_as, self.outputs, self.temps = inputs, read_as, outputs, temps
        self.predict_factory, self.batch_rows = predict_factory, batch_rows

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        predict = None
        for batch in batches:
            if predict is None:
                predict = self.predict_factory()
            features = [_column_array(batch.column(name), spec) for name, spec in zip(self.read_as, self.inputs)]
            rows = batch.num_rows
            chunks = [predict([f[start:start + self.batch_rows] for f in features])
                      for start in range(0, rows, self.batch_rows)] if rows else []
            keep = [name for name in batch.schema.names if name not in self.temps]
            arrays = [batch.column(name) for name in keep]
            for i, spec in enumerate(self.outputs):
                values = (np.concatenate([np.asarray(c[i], dtype=np.float64).reshape(-1) for c in chunks])
                          if chunks else np.empty(0))
                arrays.append(_output_array(values, rows, spec))
            yield pa.RecordBatch.from_arrays(arrays, names=keep + [spec.column for spec in self.outputs])


def _column_array(column: Any, spec: InputSpec) -> np.ndarray:
    import pyarrow as pa

    if column.null_count:
        raise InputError(f"transform: feature column {spec.column!r} has {column.null_count} null value(s)")
    if isinstance(column.type, (pa.ListType, pa.LargeListType, pa.FixedSizeListType)):
        values = column.flatten().to_numpy(zero_copy_only=False)
        width = int(np.prod(spec.shape)) if spec.shape else 1
        if values.size != len(column) * width:
            raise InputError(f"transform: feature column {spec.column!r} must hold {width} value(s) per row "
                             f"(shape {spec.shape}, as in training); its rows hold other lengths")
        return values.astype(spec.dtype, copy=False).reshape((len(column), *spec.shape))
    return column.to_numpy(zero_copy_only=False).astype(spec.dtype, copy=False).reshape((len(column), *spec.shape))


def _output_array(values: np.ndarray, rows: int, spec: OutputSpec) -> Any:
    import pyarrow as pa

    if spec.shape == ():
        if values.size != rows:
            raise InputError(f"transform: the model gave {values.size} values for {rows} rows of {spec.column!r}")
        return pa.array(values, type=pa.float64())
    width = int(np.prod(spec.shape))
    if values.size != rows * width:
        raise InputError(f"transform: the model's output for {spec.column!r} has {values.size // max(rows, 1)} "
                         f"values per row; training gave shape {spec.shape}")
    offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(values, type=pa.float64()))
