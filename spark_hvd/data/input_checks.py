"""check_input: reject a DataFrame that cannot train the model, on the driver, before anything is launched."""

from __future__ import annotations

import numbers
from typing import Any, Sequence

from spark_hvd.data.columns import NUMERIC_TYPES, VECTOR_DTYPE, ColumnSpec, column_ref, is_vector_type
from spark_hvd.data.validation_split import normalized_validation, validation_flag
from spark_hvd.errors import InputError

SUPPORTED = "numeric scalars, fixed-length arrays of numbers, or ml Vectors"


def check_input(df: Any, feature_cols: Sequence[str] | str, label_cols: Sequence[str] | str,
                sample_weight_col: str | None = None, validation: float | str | None = None,
                check_finite: bool = True) -> dict[str, ColumnSpec]:
    """The specs of the feature, label and sample-weight columns (in that order), or InputError.

    Runs one Spark aggregation: the row count, nulls per column, the array lengths seen and, with
    check_finite, the rows holding NaN or infinite values in each floating column.
    """
    validation = normalized_validation(validation)
    features = _names("feature_cols", feature_cols)
    labels = _names("label_cols", label_cols)
    wanted = list(dict.fromkeys([*features, *labels, *([sample_weight_col] if sample_weight_col else [])]))
    fields = {field.name: field for field in df.schema.fields}
    missing = [name for name in [*wanted, *_validation_column(validation)] if name not in fields]
    if missing:
        raise InputError(f"column(s) {', '.join(repr(m) for m in missing)} not in the DataFrame; "
                         f"it has: {', '.join(fields) or '(no columns)'}")
    _check_validation(validation, fields, wanted)
    kinds = {name: _column_kind(fields[name].dataType, name) for name in wanted}
    if sample_weight_col and kinds[sample_weight_col] != "scalar":
        raise InputError(f"sample_weight_col {sample_weight_col!r} must be a numeric scalar column, "
                         f"not {fields[sample_weight_col].dataType.simpleString()}")
    floating = {name for name in wanted if check_finite and _is_floating(fields[name].dataType)}
    stats = _aggregate(df, kinds, validation, floating)
    if stats["rows"] == 0:
        raise InputError("the DataFrame is empty: there is nothing to train on")
    specs = {}
    for name in wanted:
        nulls = stats[f"nulls:{name}"]
        if nulls:
            raise InputError(f"column {name!r} has {nulls} null value(s) in {stats['rows']} rows")
        non_finite = stats.get(f"nonfinite:{name}", 0)
        if non_finite:
            raise InputError(f"column {name!r} has {non_finite} row(s) with NaN or infinite values in "
                             f"{stats['rows']} rows; drop or fix them, or pass check_finite=False")
        specs[name] = _spec(name, fields[name].dataType, kinds[name], stats)
    if isinstance(validation, str):
        _check_validation_rows(validation, stats)
    return specs


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
    """'scalar', 'array' or 'vector'; InputError for anything else."""
    if is_vector_type(data_type):
        return "vector"
    type_name = data_type.typeName()
    if type_name in NUMERIC_TYPES:
        return "scalar"
    if type_name == "array" and data_type.elementType.typeName() in NUMERIC_TYPES:
        return "array"
    raise InputError(f"column {name!r} has type {data_type.simpleString()}, which cannot be fed to a model; "
                     f"supported: {SUPPORTED}")


def _is_floating(data_type: Any) -> bool:
    if is_vector_type(data_type):
        return True
    if data_type.typeName() == "array":
        data_type = data_type.elementType
    return data_type.typeName() in ("float", "double")


def _non_finite(column: Any) -> Any:
    from pyspark.sql import functions as F

    return F.isnan(column) | (F.abs(column) == float("inf"))


def _aggregate(df: Any, kinds: dict[str, str], validation: float | str | None,
               floating: set[str] = frozenset()) -> dict[str, int]:
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    expressions = [F.count(F.lit(1)).alias("rows")]
    for i, (name, kind) in enumerate(kinds.items()):
        column = F.col(column_ref(name))
        expressions.append(F.sum(column.isNull().cast("long")).alias(f"n{i}"))
        if kind != "scalar":
            length = F.size(vector_to_array(column) if kind == "vector" else column)
            valid_length = F.when(column.isNotNull(), length)
            expressions += [F.min(valid_length).alias(f"lo{i}"), F.max(valid_length).alias(f"hi{i}")]
        if name in floating:
            values = vector_to_array(column) if kind == "vector" else column
            bad = _non_finite(values) if kind == "scalar" else F.exists(values, _non_finite)
            expressions.append(F.sum(F.coalesce(bad, F.lit(False)).cast("long")).alias(f"f{i}"))
    if isinstance(validation, str):
        flag = validation_flag(df, validation, seed=0)
        expressions += [F.sum(flag.cast("long")).alias("val_rows"),
                        F.sum(F.col(column_ref(validation)).isNull().cast("long")).alias("val_nulls")]
    row = df.agg(*expressions).collect()[0].asDict()
    stats = {"rows": int(row["rows"])}
    for i, name in enumerate(kinds):
        stats[f"nulls:{name}"] = int(row[f"n{i}"] or 0)
        if f"lo{i}" in row:
            stats[f"lo:{name}"], stats[f"hi:{name}"] = row[f"lo{i}"], row[f"hi{i}"]
        if f"f{i}" in row:
            stats[f"nonfinite:{name}"] = int(row[f"f{i}"] or 0)
    if "val_rows" in row:
        stats["val_rows"], stats["val_nulls"] = int(row["val_rows"] or 0), int(row["val_nulls"] or 0)
    return stats


def _spec(name: str, data_type: Any, kind: str, stats: dict[str, int]) -> ColumnSpec:
    if kind == "scalar":
        return ColumnSpec(name, NUMERIC_TYPES[data_type.typeName()], (), kind)
    shortest, longest = stats[f"lo:{name}"], stats[f"hi:{name}"]
    what = "vectors" if kind == "vector" else "arrays"
    if shortest != longest:
        raise InputError(f"column {name!r} holds {what} of different lengths ({shortest} and {longest} seen); "
                         "every row must have the same length")
    if shortest == 0:
        raise InputError(f"column {name!r} holds empty {what}")
    dtype = VECTOR_DTYPE if kind == "vector" else NUMERIC_TYPES[data_type.elementType.typeName()]
    return ColumnSpec(name, dtype, (int(shortest),), kind)


def _check_validation_rows(validation: str, stats: dict[str, int]) -> None:
    if stats["val_nulls"]:
        raise InputError(f"validation column {validation!r} has {stats['val_nulls']} null value(s)")
    if stats["val_rows"] == 0:
        raise InputError(f"validation column {validation!r} is false on every row: no validation data")
    if stats["val_rows"] == stats["rows"]:
        raise InputError(f"validation column {validation!r} is true on every row: no training data")

