"""materialize: write the columns fit() needs to Parquet under the Store, once per DataFrame.

fit() uses materialize_checked: the input checks count what they need in the same pass that writes.

Concurrent fits of one DataFrame (tuning runs several at once; several drivers may share a Store) compute one
key. So each write goes to a private version directory of its own (materialized.py), which nothing else reads
or deletes, and is published by replacing the metadata file (row counts, column specs, the version, its files
and row groups) whole: Store.write_bytes is a rename where the filesystem has an atomic one, one PUT on an object
store. A version is never changed or deleted once published, since a fit may be reading it; a fit deletes only
its own version, and only when it was never published (its rows were refused, its write failed, or a concurrent
writer published a usable one first). A version that lost a race to publish, or whose writer crashed, stays
behind until the user deletes ``intermediate_data`` while no fit runs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import posixpath
import time
import uuid
from typing import Any

from spark_hvd.data.column_stats import merge_stats
from spark_hvd.data.columns import ColumnSpec
from spark_hvd.data.input_checks import InputPlan, plan_for_specs, specs_from_stats, stats_columns
from spark_hvd.data.materialized import METADATA_NAME, DataFile, Materialized, version_path
from spark_hvd.data.one_writer import one_writer
from spark_hvd.data.partition_writer import MAX_ROW_GROUP_ROWS, REPORT_DDL, STATS_REPORT, WriteJob, write_partition
from spark_hvd.data.rechunk import rechunk_split
from spark_hvd.data.validation_split import normalized_validation
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
    _check_num_proc(num_proc)
    validation = normalized_validation(validation)
    group_rows = _row_group_rows(columns, row_group_rows, row_group_bytes)
    key = materialization_key(df, columns, validation, seed, group_rows)
    with one_writer(store.get_intermediate_path(key)):
        found = _reusable(store, key, num_proc) if reuse else None
        if found is not None:
            return found
        plan = plan_for_specs(df, columns, validation)
        result = _write(df, store, key, plan, seed, WriteJob(store, {}, group_rows, plan.names), columns)
        return _complete(result, num_proc, reuse)


def materialize_checked(df: Any, store: Store, plan: InputPlan, seed: int, num_proc: int, *,
                        row_group_rows: int | None = None, row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
                        reuse: bool = True) -> Materialized:
    """check_input and materialize in one pass over the data: the Parquet write counts what the checks need.

    ``plan`` is check_schema's (the schema is checked already). When the counts fail a check, the files
    just written are deleted and the InputError names the column, as check_input's would. A materialisation
    found for the same DataFrame is checked again from the counts kept with it (check_finite may differ),
    and reused. Row groups hold row_group_rows rows, or as many rows as fit in row_group_bytes (the row
    width is read off the data as it is written).
    """
    _check_num_proc(num_proc)
    if row_group_rows is not None:
        row_group_rows = _row_group_rows({}, row_group_rows, 1)
    elif row_group_bytes < 1:
        raise InputError(f"row_group_bytes must be at least 1, got {row_group_bytes}")
    # Row groups sized by bytes have 0 rows in the key: the schema alone cannot turn bytes into rows.
    key = materialization_key(df, plan.schema_specs(), plan.validation, seed, row_group_rows or 0,
                              row_group_bytes=row_group_bytes)
    # Fits of this DataFrame started beside this one wait here for its write, and reuse it.
    with one_writer(store.get_intermediate_path(key)):
        found = _reusable(store, key, num_proc) if reuse else None
        if found is not None:
            if found.input_stats is not None:
                specs_from_stats(plan, found.input_stats)
            return found
        job = WriteJob(store, {}, row_group_rows, plan.names, stats=plan.stats_job(),
                       row_group_bytes=row_group_bytes)
        return _complete(_write(df, store, key, plan, seed, job, None), num_proc, reuse)


def _check_num_proc(num_proc: int) -> None:
    if num_proc < 1:
        raise InputError(f"num_proc must be at least 1, got {num_proc}")


def _reusable(store: Store, key: str, num_proc: int) -> Materialized | None:
    metadata_path = posixpath.join(store.get_intermediate_path(key), METADATA_NAME)
    if not store.exists(metadata_path):
        return None
    try:
        found = Materialized.from_json(store, store.read_bytes(metadata_path))
    except (ValueError, KeyError):
        return None            # an older format's: written again, and published over it
    # Written for fewer ranks (small data, few row groups): a new version is written and published, since
    # the published one may be in use.
    return None if _needs_rechunk(found, num_proc) else Materialized(**{**found.__dict__, "reused": True})


def _complete(result: Materialized, num_proc: int, reuse: bool) -> Materialized:
    """Row groups enough for every rank (the version is still private: nobody reads it), then publish it.

    A concurrent writer may have published a version this fit can use while this one was written: that one
    is used, and this one, which nobody else has seen, deleted (with reuse=False, this one replaces it).
    """
    try:
        result = _with_enough_row_groups(result, num_proc)
        published = _reusable(result.store, result.key, num_proc) if reuse else None
    except BaseException:
        _delete_version(result.store, result.key, result.version)
        raise
    if published is not None:
        _delete_version(result.store, result.key, result.version)
        return published
    result.store.write_bytes(result.metadata_path(), result.to_json())
    return result


def materialization_key(df: Any, columns: dict[str, ColumnSpec], validation: float | str | None, seed: int,
                        row_group_rows: int, row_group_bytes: int | None = None) -> str:
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
                **({"row_group_bytes": row_group_bytes} if row_group_bytes is not None else {}),
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


def _write(df: Any, store: Store, key: str, plan: InputPlan, seed: int, job: WriteJob,
           columns: dict[str, ColumnSpec] | None) -> Materialized:
    """One Spark job writes the plan's columns as Parquet; with ``job.stats`` it also counts them, and the
    counts, checked, give the specs (``columns`` is None then; else the specs known before)."""
    version = _new_version()
    split_paths = {"train": version_path(store.get_train_data_path(key), version)}
    if plan.validation is not None:
        split_paths["val"] = version_path(store.get_val_data_path(key), version)
    job = WriteJob(**{**job.__dict__, "split_paths": split_paths})
    try:
        reports = df.select(*stats_columns(df, plan, seed)).mapInArrow(
            functools.partial(write_partition, job), REPORT_DDL).collect()
        stats = merge_stats([json.loads(r["stats"]) for r in reports if r["split"] == STATS_REPORT])
        columns = specs_from_stats(plan, stats) if columns is None else columns
        files = _reported_files(store, split_paths, reports)
        train_rows, val_rows = (sum(f.rows for f in files[split]) for split in ("train", "val"))
        if train_rows == 0:
            raise InputError(f"validation={plan.validation!r} left no training rows")
        if plan.validation is not None and val_rows == 0:
            raise InputError(f"validation={plan.validation!r} selected no validation rows out of {train_rows}")
    except BaseException:
        _delete_version(store, key, version)    # refused or failed: none of it stays behind
        raise
    return Materialized(key=key, train_path=split_paths["train"], val_path=split_paths.get("val"),
                        train_rows=train_rows, val_rows=val_rows, columns=dict(columns), store=store,
                        train_files=files["train"], val_files=files["val"], version=version,
                        input_stats=stats if job.stats is not None else None)


def _new_version() -> str:
    """A name no other writer picks; it starts with the UTC time, so a person can tell old ones apart."""
    return f"v{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:12]}"


def _reported_files(store: Store, split_paths: dict[str, str], reports: list[Any]) -> dict[str, tuple[DataFile, ...]]:
    """The files of each split, as the write tasks reported them; files no report names are deleted."""
    files: dict[str, list[DataFile]] = {"train": [], "val": []}
    for report in reports:
        if report["split"] != STATS_REPORT:
            files[report["split"]].append(DataFile(report["name"], tuple(int(n) for n in report["row_groups"])))
    for split, path in split_paths.items():
        _remove_unreported(store, path, {data_file.name for data_file in files[split]})
    return {split: tuple(sorted(found, key=lambda f: f.name)) for split, found in files.items()}


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


def _delete_version(store: Store, key: str, version: str) -> None:
    """Delete this writer's own, unpublished version of each split."""
    if not version:
        return          # data written in the split paths themselves is no writer's own
    # The splits lie under the intermediate path unless the Store names their own (Horovod's train_path, val_path).
    for split_path in (store.get_train_data_path(key), store.get_val_data_path(key)):
        store.delete(version_path(split_path, version))
