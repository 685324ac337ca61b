"""materialize: write the columns fit() needs to Parquet under the Store, once per DataFrame.

A materialisation is complete when its metadata file (row counts, column specs, files and row groups) exists;
that file is written last, so a crashed or interrupted write is detected and redone from scratch.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import posixpath
from typing import Any

from spark_hvd.data.columns import ColumnSpec, column_ref, is_vector_type
from spark_hvd.data.materialized import METADATA_NAME, DataFile, Materialized
from spark_hvd.data.partition_writer import (
    MAX_ROW_GROUP_ROWS, REPORT_DDL, VALIDATION_FLAG, WriteJob, write_partition,
)
from spark_hvd.data.rechunk import rechunk_split
from spark_hvd.data.validation_split import normalized_validation, validation_flag
from spark_hvd.errors import InputError
from spark_hvd.store import Store

# A row group of about this size reads in one request and shuffles at a useful grain.
DEFAULT_ROW_GROUP_BYTES = 4 * 1024 * 1024
# Petastorm shards by row group; a few per rank keeps its shards even.
ROW_GROUPS_PER_RANK = 4


def materialize(df: Any, store: Store, columns: dict[str, ColumnSpec], validation: float | str | None,
                seed: int, num_proc: int, *, row_group_rows: int | None = None,
                row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES, reuse: bool = True) -> Materialized:
    """Write `columns` of df (checked by check_input) as Parquet, split off the validation rows, return where.

    validation: a fraction (rows chosen by rand(seed)), a boolean or numeric column (not written), or None.
    Row groups hold row_group_rows rows, or as many as fit in row_group_bytes. A split with fewer than
    num_proc * ROW_GROUPS_PER_RANK row groups is rewritten with smaller ones, so every rank has some.
    """
    if num_proc < 1:
        raise InputError(f"num_proc must be at least 1, got {num_proc}")
    validation = normalized_validation(validation)
    group_rows = _row_group_rows(columns, row_group_rows, row_group_bytes)
    key = materialization_key(df, columns, validation, seed, group_rows)
    metadata_path = posixpath.join(store.get_intermediate_path(key), METADATA_NAME)
    if reuse and store.exists(metadata_path):
        found = Materialized.from_json(store, store.read_bytes(metadata_path))
        if not _needs_rechunk(found, num_proc):
            return Materialized(**{**found.__dict__, "reused": True})
        # Written for fewer ranks: small data (few row groups), rewritten rather than patched in place.
    store.delete(store.get_intermediate_path(key))       # an earlier, incomplete attempt
    result = _write(df, store, key, columns, validation, seed, group_rows)
    result = _with_enough_row_groups(result, num_proc)
    store.write_bytes(metadata_path, result.to_json())
    return result


def materialization_key(df: Any, columns: dict[str, ColumnSpec], validation: float | str | None, seed: int,
                        row_group_rows: int) -> str:
    """Equal for the same DataFrame asked for the same columns and split.

    The analysed plan names the source and every transformation; its semantic hash adds what the text
    leaves out (the rows of a local relation, the identity of an RDD), so two DataFrames whose plans print
    alike in different sessions do not collide.
    """
    jdf = getattr(df, "_jdf", None)            # absent on Spark Connect, where the semantic hash must do
    plan = jdf.queryExecution().analyzed().toString() if jdf is not None else df.schema.simpleString()
    identity = {"plan": plan, "semantic_hash": int(df.semanticHash()),
                "columns": [spec.to_json() for spec in columns.values()],
                "validation": validation, "row_group_rows": row_group_rows,
                # The seed only picks the rows of a validation fraction.
                "seed": seed if isinstance(validation, float) else None}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def _row_group_rows(columns: dict[str, ColumnSpec], row_group_rows: int | None, row_group_bytes: int) -> int:
    if row_group_rows is not None:
        if row_group_rows < 1:
            raise InputError(f"row_group_rows must be at least 1, got {row_group_rows}")
        return min(row_group_rows, MAX_ROW_GROUP_ROWS)
    if row_group_bytes < 1:
        raise InputError(f"row_group_bytes must be at least 1, got {row_group_bytes}")
    row_bytes = max(1, sum(spec.row_bytes for spec in columns.values()))
    return max(1, min(row_group_bytes // row_bytes, MAX_ROW_GROUP_ROWS))


def _write(df: Any, store: Store, key: str, columns: dict[str, ColumnSpec], validation: float | str | None,
           seed: int, row_group_rows: int) -> Materialized:
    from pyspark.sql import functions as F

    # Positional names through Spark: mapInArrow looks its input columns up by name, and dots break that.
    selected = [_as_array(df, spec).alias(f"c{i}") for i, spec in enumerate(columns.values())]
    split_paths = {"train": store.get_train_data_path(key)}
    if validation is not None:
        split_paths["val"] = store.get_val_data_path(key)
        flag = validation_flag(df, validation, seed)
        selected.append(flag.alias(VALIDATION_FLAG))
    job = WriteJob(store, split_paths, row_group_rows, tuple(columns))
    reports = df.select(*selected).mapInArrow(functools.partial(write_partition, job), REPORT_DDL).collect()
    files: dict[str, list[DataFile]] = {"train": [], "val": []}
    for report in reports:
        files[report["split"]].append(DataFile(report["name"], tuple(int(n) for n in report["row_groups"])))
    for split, path in split_paths.items():
        _remove_unreported(store, path, {data_file.name for data_file in files[split]})
    train = tuple(sorted(files["train"], key=lambda f: f.name))
    val = tuple(sorted(files["val"], key=lambda f: f.name))
    train_rows, val_rows = sum(f.rows for f in train), sum(f.rows for f in val)
    if train_rows == 0:
        raise InputError(f"validation={validation!r} left no training rows")
    if validation is not None and val_rows == 0:
        raise InputError(f"validation={validation!r} selected no validation rows out of {train_rows}")
    return Materialized(key=key, train_path=split_paths["train"], val_path=split_paths.get("val"),
                        train_rows=train_rows, val_rows=val_rows, columns=dict(columns), store=store,
                        train_files=train, val_files=val)


def _as_array(df: Any, spec: ColumnSpec) -> Any:
    """The column as Parquet will hold it: ml Vectors become arrays of doubles."""
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    column = F.col(column_ref(spec.name))
    if is_vector_type(df.schema[spec.name].dataType):
        column = vector_to_array(column, "float64")
    return column


def _remove_unreported(store: Store, directory: str, reported: set[str]) -> None:
    """Delete files left by failed or speculative task attempts; only reported files belong to the data."""
    for path in store.list(directory):
        if posixpath.basename(path) not in reported:
            store.delete(path)


def _needs_rechunk(data: Materialized, num_proc: int) -> list[str]:
    """The splits with fewer row groups than num_proc ranks want (and more rows than row groups)."""
    wanted = num_proc * ROW_GROUPS_PER_RANK
    return [split for split in ("train", "val")
            if len(data.row_groups(split)) < min(wanted, data.rows(split))]


def _with_enough_row_groups(data: Materialized, num_proc: int) -> Materialized:
    changes: dict[str, Any] = {}
    for split in _needs_rechunk(data, num_proc):
        group_rows = math.ceil(data.rows(split) / (num_proc * ROW_GROUPS_PER_RANK))
        changes[f"{split}_files"] = rechunk_split(data.store, data.path(split), data.files(split), group_rows)
    return Materialized(**{**data.__dict__, **changes}) if changes else data

