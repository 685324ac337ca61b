"""Batched prediction over a DataFrame: one ``mapInArrow`` pass, whole Arrow batches at a time.

The framework supplies ``predict_factory``: a picklable zero-argument callable, called once per
partition on the executor, that returns ``predict(features: list[np.ndarray]) -> list[np.ndarray]``
(one array per output, rows first). Vector columns are turned into arrays by Spark first.

With an ``InferenceTransformation`` (the fit's ``transformation_fn``, or the model's
``inference_transformation_fn``), each chunk of ``batch_rows`` rows is decoded as the fit's feeds decode it
(bytes, str, an image's (height, width, channels) uint8 pixels, a ragged row's own array, a nested array
with its shape), the function runs on its rows (or once on the chunk, for a BatchTransformation), and
the model gets the feature columns it returns. It runs in the partition's own Python worker: Spark runs
one per task slot, so every core of the executor is already decoding (see docs/data.md).

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

from spark_hvd.data.columns import ENCODED_KINDS, ColumnSpec, column_ref
from spark_hvd.errors import InputError
from spark_hvd.estimator.classifier_outputs import ClassifierOutputs

_TEMP_PREFIX = "__shvd_input_"


@dataclass(frozen=True)
class InputSpec:
    column: str
    dtype: str
    shape: tuple[int, ...]
    kind: str = ""              # the column's kind at fit (columns.KINDS); "" unknown: numeric


@dataclass(frozen=True)
class InferenceTransformation:
    """What transform() applies to the rows before predicting: ``fn`` (per row, or a BatchTransformation),
    with the fit's edit and removed fields where it is the fit's function."""

    fn: Callable[..., Any]
    edit_fields: Any = None
    removed_fields: Any = None
    # Columns the rows carry beside the features where the DataFrame has them (a binaryFile DataFrame's path).
    carried: tuple[str, ...] = ("path",)


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
                      batch_rows: int, transformation: InferenceTransformation | None = None,
                      classifier: ClassifierOutputs | None = None) -> Any:
    """Driver: the DataFrame with one prediction column per output, computed by a ``mapInArrow`` pass;
    ``transformation`` runs on each chunk's rows first (None: the feature columns go to the model as they are).
    ``classifier``: Spark ML's classifier columns too, from the same pass (classifier_outputs.py)."""
    from pyspark.ml.functions import array_to_vector, vector_to_array
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, DoubleType, StructField, StructType

    fields = {f.name: f for f in df.schema.fields}
    missing = [spec.column for spec in inputs if spec.column not in fields]
    if missing:
        raise InputError(f"transform: the DataFrame lacks feature column(s) {missing}; it has {sorted(fields)}")
    clashing = [spec.column for spec in outputs if spec.column in fields]
    if clashing:
        raise InputError(f"transform: output column(s) {clashing} already exist in the DataFrame; "
                         "choose other names with setOutputCols")
    _check_encoded_inputs(inputs, fields, transformation)
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
    added = classifier.columns() if classifier is not None else []
    out_fields += [StructField(name, ArrayType(DoubleType()) if vector else DoubleType()) for name, vector in added]
    schema = StructType(list(df.schema.fields) + out_fields)
    carried = [] if transformation is None else [name for name in transformation.carried
                                                  if name in fields and name not in read_as]
    # Shipped as cloudpickle's bytes, as the fit ships it to the ranks (and the predictors their models): a
    # function registered with cloudpickle.register_pickle_by_value for the fit travels the same way here.
    blob = None if transformation is None else _pickled(transformation)
    predictor = _PartitionPredictor(list(inputs), read_as, list(outputs), temps, predict_factory, batch_rows,
                                    blob, carried, classifier)
    predicted = prepared.mapInArrow(predictor, schema)
    vectors = [spec.column for spec in outputs if spec.vector] + [name for name, vector in added if vector]
    for column in vectors:
        predicted = predicted.withColumn(column, array_to_vector(F.col(column_ref(column))))
    return predicted


def _pickled(transformation: InferenceTransformation) -> bytes:
    import cloudpickle

    try:
        return cloudpickle.dumps(transformation)
    except Exception as exc:
        raise InputError(f"transform: the transformation {transformation.fn!r} cannot be pickled for the executors "
                         f"({type(exc).__name__}: {exc}); make it a function of importable or picklable "
                         "objects") from exc


def _check_encoded_inputs(inputs: Sequence[InputSpec], fields: dict[str, Any],
                          transformation: InferenceTransformation | None) -> None:
    """Driver: InputError naming a feature column of encoded values (binary, string, image, ragged) that would
    reach the model with no transformation to decode it."""
    from spark_hvd.data.columns import is_image_type

    if transformation is not None:
        return
    for spec in inputs:
        data_type = fields[spec.column].dataType
        if spec.kind in ENCODED_KINDS or data_type.typeName() in ("binary", "string") or is_image_type(data_type):
            kind = spec.kind or data_type.simpleString()
            raise InputError(f"transform: feature column {spec.column!r} ({kind}) holds encoded values, which the "
                             "model cannot take as they are, and this model applies no transformation "
                             "(inference_transformation_fn=False, or a model that was not fitted with a "
                             "transformation_fn): give inference_transformation_fn a function that decodes each "
                             "row (see docs/data.md)")


class _PartitionPredictor:
    """Executor: predicts one partition's Arrow batches, ``batch_rows`` rows per forward pass."""

    def __init__(self, inputs: list[InputSpec], read_as: list[str], outputs: list[OutputSpec], temps: list[str],
                 predict_factory: Callable[[], Any], batch_rows: int,
                 transformation_blob: bytes | None = None, carried: Sequence[str] = (),
                 classifier: ClassifierOutputs | None = None) -> None:
        self.inputs, self.read_as, self.outputs, self.temps = inputs, read_as, outputs, temps
        self.predict_factory, self.batch_rows = predict_factory, batch_rows
        self.transformation_blob, self.carried = transformation_blob, list(carried)
        self.classifier = classifier
        self.transformation: InferenceTransformation | None = None

    def _features(self, batch: Any) -> list[np.ndarray]:
        """The model's inputs for the rows of ``batch`` (an Arrow RecordBatch)."""
        if self.transformation is None:
            return [_column_array(batch.column(name), spec) for name, spec in zip(self.read_as, self.inputs)]
        return _transformed_features(batch, self.read_as, self.inputs, self.carried, self.transformation)

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        predict = None
        for batch in batches:
            if predict is None:
                predict = self.predict_factory()
                if self.transformation_blob is not None:
                    import cloudpickle

                    self.transformation = cloudpickle.loads(self.transformation_blob)
            rows = batch.num_rows
            # Sliced before decoding, so that at most batch_rows rows are decoded at once.
            chunks = [predict(self._features(batch.slice(start, self.batch_rows)))
                      for start in range(0, rows, self.batch_rows)] if rows else []
            keep = [name for name in batch.schema.names if name not in self.temps]
            arrays = [batch.column(name) for name in keep]
            names = keep + [spec.column for spec in self.outputs]
            outputs = [np.concatenate([np.asarray(c[i], dtype=np.float64).reshape(-1) for c in chunks])
                       if chunks else np.empty(0) for i in range(len(self.outputs))]
            arrays += [_output_array(values, rows, spec) for values, spec in zip(outputs, self.outputs)]
            if self.classifier is not None:
                values = outputs[self.classifier.output_index]
                scores = values.reshape(rows, -1) if rows else np.empty((0, 1))
                arrays += [_classifier_array(added) for added in self.classifier.values(scores)]
                names += [name for name, _ in self.classifier.columns()]
            yield pa.RecordBatch.from_arrays(arrays, names=names)


def _transformed_features(batch: Any, read_as: Sequence[str], inputs: Sequence[InputSpec], carried: Sequence[str],
                          transformation: InferenceTransformation) -> list[np.ndarray]:
    """Executor: the rows of ``batch`` decoded as the fit's feeds decode them, through the transformation; the
    feature columns it returns. The user's error gets a note naming the row (and its path where there is one)."""
    from spark_hvd.data.feed.decode_pool import add_note
    from spark_hvd.data.read.row_chunks import decode_column
    from spark_hvd.data.feed.transformation import RowCounter, apply_transformation, require_model_ready

    rows: dict[str, np.ndarray] = {}
    for name, spec in zip(read_as, inputs):
        column = batch.column(name)
        if spec.kind in ENCODED_KINDS:
            if column.null_count:
                raise InputError(f"transform: feature column {spec.column!r} has {column.null_count} null value(s)")
            rows[spec.column] = decode_column(column, ColumnSpec(spec.column, spec.dtype, spec.shape, spec.kind))
        else:
            rows[spec.column] = _column_array(column, spec)
    for name in carried:
        rows[name] = decode_column(batch.column(name), ColumnSpec(name, "object", (), "string"))
    names = [spec.column for spec in inputs]
    fn = transformation.fn
    counted = None if getattr(fn, "per_batch", False) else RowCounter(fn)
    try:
        out = apply_transformation(rows, counted or fn, transformation.edit_fields, transformation.removed_fields)
    except Exception as exc:
        row = counted.row if counted is not None and 0 <= counted.row < batch.num_rows else None
        where = f"row {row} of a chunk of {batch.num_rows}" if row is not None else f"a chunk of {batch.num_rows} rows"
        paths = rows.get("path")
        if paths is not None and len(paths):
            where += f" (path {paths[row if row is not None else 0]})"
        add_note(exc, f"spark_hvd: the transformation raised this in transform(), on {where}. At transform time "
                      f"the rows hold the feature columns {names}{' and ' + str(list(carried)) if carried else ''} "
                      "only, no label: make the function tolerate a missing label (row.get('label')), or give "
                      "the model another with setInferenceTransformationFn (docs/data.md)")
        raise
    missing = [name for name in names if name not in out]
    if missing:
        raise InputError(f"transform: the transformation returned no feature column(s) {missing}; it returned "
                         f"{sorted(out)}")
    require_model_ready(out, names)
    return [out[name] for name in names]




def _column_array(column: Any, spec: InputSpec) -> np.ndarray:
    import pyarrow as pa

    if column.null_count:
        raise InputError(f"transform: feature column {spec.column!r} has {column.null_count} null value(s)")
    if isinstance(column.type, (pa.ListType, pa.LargeListType, pa.FixedSizeListType)):
        values = column
        # A nested array (array<array<...>>) is flattened to its numbers; the spec's shape puts them back.
        while isinstance(values.type, (pa.ListType, pa.LargeListType, pa.FixedSizeListType)):
            values = values.flatten()
        values = values.to_numpy(zero_copy_only=False)
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
    return _double_lists(values, rows, width)


def _double_lists(values: np.ndarray, rows: int, width: int) -> Any:
    """``rows`` lists of ``width`` doubles from their flat values (vectors once mapInArrow returns)."""
    import pyarrow as pa

    offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1), type=pa.float64()))


def _classifier_array(values: np.ndarray) -> Any:
    """A classifier column's Arrow values: doubles, or lists of doubles (turned into vectors afterwards)."""
    import pyarrow as pa

    if values.ndim == 1:
        return pa.array(values, type=pa.float64())
    return _double_lists(values, *values.shape)
