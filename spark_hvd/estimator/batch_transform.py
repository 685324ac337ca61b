"""Batched prediction over a DataFrame: one ``mapInArrow`` pass, whole Arrow batches at a time.

The framework supplies ``predict_factory``: a picklable zero-argument callable, called once per
partition on the executor, that returns ``predict(features: list[np.ndarray]) -> list[np.ndarray]``
(one array per output, rows first). Vector columns are turned into arrays by Spark first.

A prediction column is typed after its label column, as in Horovod: a vector label gives a
DenseVector, an array label an array of doubles, and a scalar label with one output value per row
a scalar of the label's own type (integer and boolean labels get the rounded output). A scalar
label whose output has several values per row (class scores) gets a DenseVector where the model
says ``scores_as_vectors`` (Horovod's torch and Lightning models), else an array of doubles
(Horovod's Keras model would keep only the first value).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from spark_hvd.data.columns import column_ref
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
    label_kind: str = ""        # the label column's kind: "scalar", "array", "vector" ("" unknown: a double)
    label_dtype: str = "float64"
    scores_as_vectors: bool = False   # several values per row for a scalar label: a DenseVector


    @property
    def scalar(self) -> bool:
        if self.label_kind == "":
            return self.shape == ()
        return self.label_kind == "scalar" and int(np.prod(self.shape, dtype=np.int64)) == 1

    @property
    def vector(self) -> bool:
        return self.label_kind == "vector" or (self.scores_as_vectors and self.label_kind == "scalar"
                                                and not self.scalar)

    def spark_type(self) -> Any:
        from pyspark.sql import types as T

        if not self.scalar:
            return T.ArrayType(T.DoubleType())
        if self.label_kind == "":
            return T.DoubleType()
        scalar_types = {"float32": T.FloatType, "float64": T.DoubleType, "int8": T.ByteType, "int16": T.ShortType,
                        "int32": T.IntegerType, "int64": T.LongType, "bool": T.BooleanType}
        if self.label_dtype not in scalar_types:
            raise InputError(f"label dtype {self.label_dtype} of {self.column!r} has no Spark scalar type")
        return scalar_types[self.label_dtype]()


def batched_transform(df: Any, inputs: Sequence[InputSpec], outputs: Sequence[OutputSpec],
                      predict_factory: Callable[[], Callable[[list[np.ndarray]], list[np.ndarray]]],
                      batch_rows: int) -> Any:
    from pyspark.ml.functions import array_to_vector, vector_to_array
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

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
    out_fields = [StructField(spec.column, spec.spark_type()) for spec in outputs]
    schema = StructType(list(df.schema.fields) + out_fields)
    predictor = _PartitionPredictor(list(inputs), read_as, list(outputs), temps, predict_factory, batch_rows)
    predicted = prepared.mapInArrow(predictor, schema)
    for spec in outputs:
        if spec.vector:
            predicted = predicted.withColumn(spec.column, array_to_vector(F.col(column_ref(spec.column))))
    return predicted


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

    if spec.scalar:
        if values.size != rows:
            raise InputError(f"transform: the model gave {values.size} values for {rows} rows of {spec.column!r}")
        if spec.label_kind == "" or np.dtype(spec.label_dtype).kind == "f":
            return pa.array(values.astype(spec.label_dtype if spec.label_kind else np.float64, copy=False))
        # Integer and boolean labels get the rounded output, as Horovod rounds them.
        return pa.array(np.rint(values).astype(spec.label_dtype))
    width = int(np.prod(spec.shape))
    if values.size != rows * width:
        raise InputError(f"transform: the model's output for {spec.column!r} has {values.size // max(rows, 1)} "
                         f"values per row; training gave shape {spec.shape}")
    offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(values, type=pa.float64()))
