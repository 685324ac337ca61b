"""check_input: reject a DataFrame that cannot train the model, on the driver, before anything is launched."""

from __future__ import annotations

import json
import numbers
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from spark_hvd.data.column_stats import VALIDATION_FLAG, VALIDATION_NULL, ColumnCounter, StatsJob, merge_stats
from spark_hvd.data.columns import (ENCODED_KINDS, NUMERIC_TYPES, VECTOR_DTYPE, ColumnSpec, column_ref, is_image_type,
                                    is_vector_type)
from spark_hvd.data.validation_split import normalized_validation, validation_flag
from spark_hvd.errors import InputError

SUPPORTED = ("numeric scalars, arrays of numbers (fixed-length, nested to any depth, or of varying lengths for a "
             "transformation_fn), ml Vectors, binary, string, or Spark's image struct")


@dataclass(frozen=True)
class InputPlan:
    """The columns to check and write, as the schema alone tells (no Spark job): check_schema's result."""

    names: tuple[str, ...]           # feature, label and sample-weight columns, in that order, once each
    types: dict[str, Any]            # name -> Spark DataType
    kinds: dict[str, str]            # name -> one of columns.KINDS ("array" may turn out "ragged")
    validation: float | str | None   # normalised
    check_finite: bool
    # Whether arrays of varying lengths are taken (a transformation_fn will make them model-ready).
    ragged_ok: bool = False

    def is_floating(self, name: str) -> bool:
        return _is_floating(self.types[name])

    def stats_job(self) -> StatsJob:
        return StatsJob(self.names, tuple(_list_depth(self.types[n], self.kinds[n]) for n in self.names),
                        tuple(self.is_floating(n) for n in self.names),
                        tuple(self.kinds[n] in ENCODED_KINDS for n in self.names))

    def schema_specs(self) -> dict[str, ColumnSpec]:
        """The specs as far as the schema knows them: an array's length is only known from the data."""
        return {name: ColumnSpec(name, _dtype(self.types[name], self.kinds[name]), (), self.kinds[name])
                for name in self.names}


def check_input(df: Any, feature_cols: Sequence[str] | str, label_cols: Sequence[str] | str,
                sample_weight_col: str | None = None, validation: float | str | None = None,
                check_finite: bool = True) -> dict[str, ColumnSpec]:
    """The specs of the feature, label and sample-weight columns (in that order), or InputError.

    Runs one Spark job counting the rows, nulls per column, the array lengths seen and, with
    check_finite, the rows holding NaN or infinite values in each floating column. fit() does not
    call it: its Parquet write counts the same in the same pass (materialize_checked).
    """
    plan = check_schema(df, feature_cols, label_cols, sample_weight_col, validation, check_finite)
    return specs_from_stats(plan, scan_stats(df, plan))


def check_schema(df: Any, feature_cols: Sequence[str] | str, label_cols: Sequence[str] | str,
                 sample_weight_col: str | None = None, validation: float | str | None = None,
                 check_finite: bool = True, ragged_ok: bool = False, carried: Sequence[str] = ()) -> InputPlan:
    """What the schema tells: every column exists and has a type a model can take; InputError if not.
    ``ragged_ok``: arrays of varying lengths are taken as they are (a transformation_fn will pad them);
    ``carried``: columns written beside the others where the DataFrame has them, for transformation_fn's
    rows (a binaryFile DataFrame's ``path``, which also names a row that fails to decode)."""
    validation = normalized_validation(validation)
    features = _names("feature_cols", feature_cols)
    labels = _names("label_cols", label_cols)
    fields = {field.name: field for field in df.schema.fields}
    extra = [name for name in carried if name in fields and name != validation]
    wanted = list(dict.fromkeys([*features, *labels, *([sample_weight_col] if sample_weight_col else []), *extra]))
    missing = [name for name in [*wanted, *_validation_column(validation)] if name not in fields]
    if missing:
        raise InputError(f"column(s) {', '.join(repr(m) for m in missing)} not in the DataFrame; "
                         f"it has: {', '.join(fields) or '(no columns)'}")
    _check_validation(validation, fields, wanted)
    kinds = {name: _column_kind(fields[name].dataType, name) for name in wanted}
    if sample_weight_col and kinds[sample_weight_col] != "scalar":
        raise InputError(f"sample_weight_col {sample_weight_col!r} must be a numeric scalar column, "
                         f"not {fields[sample_weight_col].dataType.simpleString()}")
    return InputPlan(tuple(wanted), {name: fields[name].dataType for name in wanted}, kinds, validation,
                     check_finite, ragged_ok)


def plan_for_specs(df: Any, columns: dict[str, ColumnSpec], validation: float | str | None) -> InputPlan:
    """The plan of columns whose specs check_input gave already."""
    types = {name: df.schema[name].dataType for name in columns}
    return InputPlan(tuple(columns), types, {name: _column_kind(types[name], name) for name in columns},
                     normalized_validation(validation), check_finite=False)


def specs_from_stats(plan: InputPlan, stats: dict[str, Any]) -> dict[str, ColumnSpec]:
    """The specs of the columns, from the counts of a pass over the data (column_stats); InputError naming
    the column when the data cannot train a model."""
    if stats["rows"] == 0:
        raise InputError("the DataFrame is empty: there is nothing to train on")
    specs = {}
    for name in plan.names:
        nulls = stats[f"nulls:{name}"]
        if nulls:
            raise InputError(f"column {name!r} has {nulls} null value(s) in {stats['rows']} rows")
        non_finite = stats.get(f"nonfinite:{name}", 0) if plan.check_finite else 0
        if non_finite:
            raise InputError(f"column {name!r} has {non_finite} row(s) with NaN or infinite values in "
                             f"{stats['rows']} rows; drop or fix them, or pass check_finite=False")
        specs[name] = _spec(name, plan.types[name], plan.kinds[name], stats, plan.ragged_ok)
    if isinstance(plan.validation, str):
        _check_validation_rows(plan.validation, stats)
    return specs


def stats_columns(df: Any, plan: InputPlan, seed: int) -> list[Any]:
    """The Spark columns a pass over the data reads, named c0, c1, ... (vectors as arrays of doubles),
    then the validation flag and, with a validation column, where it is null."""
    from pyspark.sql import functions as F

    selected = [_as_array(plan, name).alias(f"c{i}") for i, name in enumerate(plan.names)]
    if plan.validation is not None:
        selected.append(validation_flag(df, plan.validation, seed).alias(VALIDATION_FLAG))
    if isinstance(plan.validation, str):
        selected.append(F.col(column_ref(plan.validation)).isNull().alias(VALIDATION_NULL))
    return selected


def scan_stats(df: Any, plan: InputPlan) -> dict[str, Any]:
    """The counts of the whole DataFrame, from one Spark job that reads it and writes nothing."""
    import functools

    rows = df.select(*stats_columns(df, plan, seed=0)).mapInArrow(
        functools.partial(_count_partition, plan.stats_job()), "stats string").collect()
    return merge_stats([json.loads(row["stats"]) for row in rows])


def _count_partition(job: StatsJob, batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa
    from pyspark import TaskContext

    counter = ColumnCounter(job, TaskContext.get().partitionId())
    for batch in batches:
        counter.add(batch)
    yield pa.RecordBatch.from_pydict({"stats": [json.dumps(counter.stats)]})


def _as_array(plan: InputPlan, name: str) -> Any:
    """The column as Parquet will hold it: ml Vectors become arrays of doubles."""
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    column = F.col(column_ref(name))
    return vector_to_array(column, "float64") if plan.kinds[name] == "vector" else column


def _dtype(data_type: Any, kind: str) -> str:
    if kind == "vector":
        return VECTOR_DTYPE
    if kind in ("binary", "string", "image"):
        return "object"
    return NUMERIC_TYPES[_element_type(data_type).typeName()]


def _element_type(data_type: Any) -> Any:
    while data_type.typeName() == "array":
        data_type = data_type.elementType
    return data_type


def _list_depth(data_type: Any, kind: str) -> int:
    """How many levels of lists the column has as Parquet holds it (a vector is written as one)."""
    if kind == "vector":
        return 1
    depth = 0
    while kind in ("array", "nested", "ragged") and data_type.typeName() == "array":
        depth, data_type = depth + 1, data_type.elementType
    return depth


def _names(param: str, value: Sequence[str] | str) -> list[str]:
    names = [value] if isinstance(value, str) else list(value or [])
    if not names or not all(isinstance(name, str) and name for name in names):
        raise InputError(f"{param} must be a non-empty list of column names, got {value!r}")
    return names


def _validation_column(validation: float | str | None) -> list[str]:
    return [validation] if isinstance(validation, str) else []


def _check_validation(validation: Any, fields: dict[str, Any], wanted: list[str]) -> None:
    if validation is None:
        return
    if isinstance(validation, str):
        type_name = fields[validation].dataType.typeName()
        if type_name != "boolean" and type_name not in NUMERIC_TYPES:
            raise InputError(f"validation column {validation!r} must be boolean or numeric (> 0 marks a "
                             f"validation row), not {fields[validation].dataType.simpleString()}")
        if validation in wanted:
            raise InputError(f"validation column {validation!r} is also a feature, label or weight column")
        return
    if isinstance(validation, bool) or not isinstance(validation, numbers.Real) or not 0 <= validation < 1:
        raise InputError(f"validation must be a fraction in [0, 1), the name of a boolean or numeric column, "
                         f"or None; got {validation!r}")


def _column_kind(data_type: Any, name: str) -> str:
    """One of columns.KINDS (an "array" whose lengths vary is found "ragged" later); InputError for others."""
    if is_vector_type(data_type):
        return "vector"
    type_name = data_type.typeName()
    if type_name in NUMERIC_TYPES:
        return "scalar"
    if type_name in ("binary", "string"):
        return type_name
    if is_image_type(data_type):
        return "image"
    if type_name == "array" and _element_type(data_type).typeName() in NUMERIC_TYPES:
        return "array" if data_type.elementType.typeName() != "array" else "nested"
    raise InputError(f"column {name!r} has type {data_type.simpleString()}, which cannot be fed to a model; "
                     f"supported: {SUPPORTED}")


def _is_floating(data_type: Any) -> bool:
    if is_vector_type(data_type):
        return True
    return _element_type(data_type).typeName() in ("float", "double")


def _spec(name: str, data_type: Any, kind: str, stats: dict[str, Any], ragged_ok: bool) -> ColumnSpec:
    dtype = _dtype(data_type, kind)
    if kind in ("scalar", "binary", "string", "image"):
        return ColumnSpec(name, dtype, (), kind, _mean_row_bytes(name, stats))
    shortest, longest = stats[f"lo:{name}"], stats[f"hi:{name}"]
    what = "vectors" if kind == "vector" else "arrays"
    if shortest != longest:
        if kind == "array" and ragged_ok:
            return ColumnSpec(name, dtype, (), "ragged", _mean_row_bytes(name, stats))
        hint = ("; a transformation_fn may pad or truncate them" if kind == "array" else
                "; every row must have the same shape" if kind == "nested" else "")
        raise InputError(f"column {name!r} holds {what} of different lengths ({shortest} and {longest} seen); "
                         f"every row must have the same length{hint}")
    if shortest == 0:
        raise InputError(f"column {name!r} holds empty {what}")
    if kind != "nested":
        return ColumnSpec(name, dtype, (int(shortest),), kind)
    return ColumnSpec(name, dtype, (int(shortest), *_inner_shape(name, stats)), kind)


def _inner_shape(name: str, stats: dict[str, Any]) -> tuple[int, ...]:
    """A nested column's lengths below its rows' own, one per level; InputError naming the row where a
    level's lengths differ."""
    shape, level = [], 1
    while f"lo{level}:{name}" in stats:
        ragged = stats.get(f"ragged{level}:{name}")
        if ragged is not None:
            raise InputError(f"column {name!r} is ragged at nesting level {level}: row {ragged['row']} of "
                             f"partition {ragged['partition']} holds an array of {ragged['got']} values where "
                             f"the rows before it hold {ragged['expected']}; every row must have the same shape")
        if not stats[f"lo{level}:{name}"]:
            raise InputError(f"column {name!r} holds empty arrays at nesting level {level}")
        shape.append(int(stats[f"lo{level}:{name}"]))
        level += 1
    return tuple(shape)


def _mean_row_bytes(name: str, stats: dict[str, Any]) -> int:
    return int(stats.get(f"bytes:{name}", 0) // max(1, stats["rows"]))


def _check_validation_rows(validation: str, stats: dict[str, int]) -> None:
    if stats.get("val_nulls", 0):
        raise InputError(f"validation column {validation!r} has {stats['val_nulls']} null value(s)")
    if stats.get("val_rows", 0) == 0:
        raise InputError(f"validation column {validation!r} is false on every row: no validation data")
    if stats["val_rows"] == stats["rows"]:
        raise InputError(f"validation column {validation!r} is true on every row: no training data")

