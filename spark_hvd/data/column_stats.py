"""What the input checks need to know of the data (row count, nulls, array lengths, non-finite rows), counted
with pyarrow on the executors in the same pass that writes the Parquet, and merged on the driver.

A partition's counts are a plain dict, so they travel in the writer's report as JSON and are kept in the
materialisation's metadata (a later fit of the same DataFrame checks them again, e.g. with check_finite).
Keys: "rows"; per column "nulls:NAME", for arrays and vectors "lo:NAME"/"hi:NAME" (shortest and longest
length), for floating columns "nonfinite:NAME" (rows holding NaN or an infinity); with a validation
column, "val_rows" and "val_nulls".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

# Marks the rows of the validation split; never written.
VALIDATION_FLAG = "__spark_hvd_is_validation"
# True where the validation column is null (only with a validation column); never written.
VALIDATION_NULL = "__spark_hvd_validation_is_null"


@dataclass(frozen=True)
class StatsJob:
    """Which incoming columns to count: positional, in the order of ``names``."""

    names: tuple[str, ...]
    lists: tuple[bool, ...]         # per column: an array (or a vector written as one)
    floating: tuple[bool, ...]      # per column: NaN and infinities can occur


class ColumnCounter:
    """Accumulates the counts of one partition, batch by batch."""

    def __init__(self, job: StatsJob) -> None:
        self._job = job
        self.stats: dict[str, Any] = {"rows": 0}
        for name, is_list, floating in zip(job.names, job.lists, job.floating):
            self.stats[f"nulls:{name}"] = 0
            if is_list:
                self.stats[f"lo:{name}"] = self.stats[f"hi:{name}"] = None
            if floating:
                self.stats[f"nonfinite:{name}"] = 0

    def add(self, table: pa.Table | pa.RecordBatch) -> None:
        stats = self.stats
        stats["rows"] += table.num_rows
        for i, (name, is_list, floating) in enumerate(zip(self._job.names, self._job.lists, self._job.floating)):
            column = _one_array(table.column(i))
            stats[f"nulls:{name}"] += column.null_count
            if is_list:
                bounds = pc.min_max(pc.list_value_length(column)).as_py()
                stats[f"lo:{name}"] = _lower(stats[f"lo:{name}"], bounds["min"])
                stats[f"hi:{name}"] = _upper(stats[f"hi:{name}"], bounds["max"])
            if floating:
                stats[f"nonfinite:{name}"] += _non_finite_rows(column, is_list)
        names = table.schema.names
        if VALIDATION_NULL in names:
            flag = table.column(names.index(VALIDATION_FLAG))
            stats["val_rows"] = stats.get("val_rows", 0) + int(pc.sum(flag.cast(pa.int64())).as_py() or 0)
            nulls = table.column(names.index(VALIDATION_NULL))
            stats["val_nulls"] = stats.get("val_nulls", 0) + int(pc.sum(nulls.cast(pa.int64())).as_py() or 0)


def merge_stats(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One dict of counts for the whole DataFrame from the partitions' dicts."""
    merged: dict[str, Any] = {"rows": 0}     # a DataFrame without partitions sends no counts
    for part in parts:
        for key, value in part.items():
            if key.startswith("lo:"):
                merged[key] = _lower(merged.get(key), value)
            elif key.startswith("hi:"):
                merged[key] = _upper(merged.get(key), value)
            else:
                merged[key] = merged.get(key, 0) + value
    return merged


def _one_array(column: Any) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def _non_finite_rows(column: pa.Array, is_list: bool) -> int:
    values = pc.list_flatten(column) if is_list else column
    if len(values) == 0:
        return 0
    # Null values are not counted here (the null count names them); is_nan of a null is null.
    bad = pc.fill_null(pc.or_(pc.is_nan(values), pc.is_inf(values)), False)
    if not is_list:
        return int(pc.sum(bad.cast(pa.int64())).as_py() or 0)
    # A row counts once however many of its values are bad.
    return len(pc.unique(pc.filter(pc.list_parent_indices(column), bad)))


def _lower(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _upper(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
