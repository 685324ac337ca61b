"""What the input checks need to know of the data (row count, nulls, array lengths, non-finite rows), counted
with pyarrow on the executors in the same pass that writes the Parquet, and merged on the driver.

A partition's counts are a plain dict, so they travel in the writer's report as JSON and are kept in the
materialisation's metadata (a later fit of the same DataFrame checks them again, e.g. with check_finite).
Keys: "rows"; per column "nulls:NAME", for arrays and vectors "lo:NAME"/"hi:NAME" (shortest and longest
length), for nested arrays also "loK:NAME"/"hiK:NAME" at each nesting level K below the rows' own and, where a
level's lengths differ, "raggedK:NAME" (the first such row: partition, row, the lengths expected and got),
for floating columns "nonfinite:NAME" (rows holding NaN or an infinity), for encoded columns (binary, string,
image, ragged arrays) "bytes:NAME" (their Arrow bytes); with a validation column, "val_rows" and
"val_nulls".
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
    depths: tuple[int, ...]         # per column: levels of lists (1: an array, or a vector written as one)
    floating: tuple[bool, ...]      # per column: NaN and infinities can occur
    encoded: tuple[bool, ...] = ()  # per column: rows of their own size, whose bytes are counted


class ColumnCounter:
    """Accumulates the counts of one partition, batch by batch."""

    def __init__(self, job: StatsJob, partition: int = 0) -> None:
        self._job, self._partition = job, partition
        self.stats: dict[str, Any] = {"rows": 0}
        encoded = job.encoded or (False,) * len(job.names)
        for name, depth, floating, is_encoded in zip(job.names, job.depths, job.floating, encoded):
            self.stats[f"nulls:{name}"] = 0
            for level in range(depth):
                self.stats[_level_key("lo", level, name)] = self.stats[_level_key("hi", level, name)] = None
            if floating:
                self.stats[f"nonfinite:{name}"] = 0
            if is_encoded:
                self.stats[f"bytes:{name}"] = 0
        self._first_lengths: dict[str, int] = {}   # per nested level: the first length this partition saw

    def add(self, table: pa.Table | pa.RecordBatch) -> None:
        stats = self.stats
        rows_before = stats["rows"]
        stats["rows"] += table.num_rows
        job = self._job
        for i, (name, depth, floating) in enumerate(zip(job.names, job.depths, job.floating)):
            column = _one_array(table.column(i))
            stats[f"nulls:{name}"] += column.null_count
            if f"bytes:{name}" in stats:
                stats[f"bytes:{name}"] += column.nbytes
            self._count_lengths(name, column, depth, rows_before)
            if floating:
                stats[f"nonfinite:{name}"] += _non_finite_rows(column, depth)
        names = table.schema.names
        if VALIDATION_NULL in names:
            flag = table.column(names.index(VALIDATION_FLAG))
            stats["val_rows"] = stats.get("val_rows", 0) + int(pc.sum(flag.cast(pa.int64())).as_py() or 0)
            nulls = table.column(names.index(VALIDATION_NULL))
            stats["val_nulls"] = stats.get("val_nulls", 0) + int(pc.sum(nulls.cast(pa.int64())).as_py() or 0)


    def _count_lengths(self, name: str, column: pa.Array, depth: int, rows_before: int) -> None:
        """The bounds of each level's list lengths; below the rows' own level, the first row whose length
        differs from the first one this partition saw (where a ragged nesting starts)."""
        stats, values, rows = self.stats, column, None
        for level in range(depth):
            lengths = pc.list_value_length(values)
            bounds = pc.min_max(lengths).as_py()
            lo, hi = _level_key("lo", level, name), _level_key("hi", level, name)
            stats[lo], stats[hi] = _lower(stats[lo], bounds["min"]), _upper(stats[hi], bounds["max"])
            if level and bounds["min"] is not None and f"ragged{level}:{name}" not in stats:
                self._note_ragged(name, level, lengths, rows, rows_before)
            if level + 1 < depth:
                values, rows = _one_level_down(values, rows)

    def _note_ragged(self, name: str, level: int, lengths: pa.Array, rows: pa.Array, rows_before: int) -> None:
        key = f"{level}:{name}"
        if key not in self._first_lengths:
            self._first_lengths[key] = lengths[0].as_py()
        expected = self._first_lengths[key]
        differs = pc.not_equal(lengths, expected)
        if not pc.any(differs).as_py():
            return
        at = pc.index(differs, True).as_py()
        self.stats[f"ragged{key}"] = {"partition": self._partition, "row": rows_before + rows[at].as_py(),
                                      "expected": expected, "got": lengths[at].as_py()}


def _one_level_down(values: pa.Array, rows: pa.Array | None) -> tuple[pa.Array, pa.Array]:
    """The lists' elements, and the row each belongs to (``rows``: the row of each list; None: a list a row)."""
    parents = pc.list_parent_indices(values)
    return pc.list_flatten(values), parents if rows is None else pc.take(rows, parents)


def _level_key(bound: str, level: int, name: str) -> str:
    return f"{bound}:{name}" if level == 0 else f"{bound}{level}:{name}"


def merge_stats(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One dict of counts for the whole DataFrame from the partitions' dicts."""
    merged: dict[str, Any] = {"rows": 0}     # a DataFrame without partitions sends no counts
    for part in parts:
        for key, value in part.items():
            if key.startswith("lo"):
                merged[key] = _lower(merged.get(key), value)
            elif key.startswith("hi"):
                merged[key] = _upper(merged.get(key), value)
            elif key.startswith("ragged"):
                merged.setdefault(key, value)   # the first partition's first ragged row names the problem
                if value["partition"] < merged[key]["partition"]:
                    merged[key] = value
            else:
                merged[key] = merged.get(key, 0) + value
    return merged


def _one_array(column: Any) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def _non_finite_rows(column: pa.Array, depth: int) -> int:
    values, rows = column, None
    for _ in range(depth):
        values, rows = _one_level_down(values, rows)
    if len(values) == 0:
        return 0
    # Null values are not counted here (the null count names them); is_nan of a null is null.
    bad = pc.fill_null(pc.or_(pc.is_nan(values), pc.is_inf(values)), False)
    if rows is None:
        return int(pc.sum(bad.cast(pa.int64())).as_py() or 0)
    # A row counts once however many of its values are bad.
    return len(pc.unique(pc.filter(rows, bad)))


def _lower(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _upper(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
