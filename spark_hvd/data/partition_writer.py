"""The executor side of materialisation: one Spark partition -> Parquet files with fixed-size row groups.

Runs inside df.mapInArrow, writing through the Store's fsspec filesystem (Spark's own writer would need
Hadoop connectors for s3://, gs://, abfs://), and reports each file it wrote with its row-group sizes.
"""

from __future__ import annotations

import json
import posixpath
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_hvd.data.column_stats import VALIDATION_FLAG, ColumnCounter, StatsJob
from spark_hvd.store import Store

# pyarrow splits row groups above this many rows on its own.
MAX_ROW_GROUP_ROWS = 1024 * 1024
# One row per file written, and one more (split STATS_REPORT) with the partition's column counts as JSON.
REPORT_SCHEMA = pa.schema([("split", pa.string()), ("name", pa.string()), ("row_groups", pa.list_(pa.int64())),
                           ("stats", pa.string())])
REPORT_DDL = "split string, name string, row_groups array<bigint>, stats string"
STATS_REPORT = "stats"


@dataclass(frozen=True)
class WriteJob:
    store: Store
    split_paths: dict[str, str]        # "train"/"val" -> directory
    row_group_rows: int | None         # None: as many as fit in row_group_bytes, from the first rows' width
    column_names: tuple[str, ...]      # the Parquet names of the incoming columns, in order
    stats: StatsJob | None = None      # count what the input checks need while writing (column_stats)
    row_group_bytes: int = 4 * 1024 * 1024

    def group_rows_for(self, table: pa.Table) -> int:
        """Rows per row group: as set, or as many rows of ``table``'s width as fit in row_group_bytes.

        Every row of an array column has the same length (else the checks fail the fit), so each
        partition finds the same width."""
        if self.row_group_rows is not None:
            return self.row_group_rows
        return max(1, min(self.row_group_bytes // max(1, _row_bytes(table)), MAX_ROW_GROUP_ROWS))


class RowGroupWriter:
    """Buffers rows and writes them as row groups of exactly row_group_rows (the last one may be shorter)."""

    def __init__(self, fs: Any, path: str, row_group_rows: int = 0) -> None:
        self._fs = fs
        self.path = path
        self.row_group_rows = row_group_rows
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._file: Any = None
        self._writer: pq.ParquetWriter | None = None
        self.row_groups: list[int] = []

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self._buffer.append(table)
        self._buffered += table.num_rows
        while self._buffered >= self.row_group_rows:
            self._flush(self.row_group_rows)

    def close(self) -> list[int]:
        """Write what is left; the row-group sizes written (empty when no row came, and no file exists)."""
        if self._buffered:
            self._flush(self._buffered)
        if self._writer is not None:
            self._writer.close()
            self._file.close()
        return self.row_groups

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()

    def _flush(self, rows: int) -> None:
        merged = pa.concat_tables(self._buffer).combine_chunks() if len(self._buffer) > 1 else self._buffer[0]
        group, rest = merged.slice(0, rows), merged.slice(rows)
        if self._writer is None:
            self._file = self._fs.open(self.path, "wb")
            # Dictionary encoding only pays for repeated values; on float features it triples the write time.
            self._writer = pq.ParquetWriter(self._file, group.schema, use_dictionary=_dictionary_columns(group.schema))
        self._writer.write_table(group, row_group_size=rows)
        self.row_groups.append(rows)
        self._buffer = [rest] if rest.num_rows else []
        self._buffered = rest.num_rows


def _row_bytes(table: pa.Table) -> int:
    width = 0
    for column in table.columns:
        data_type, values = column.type, 1
        if pa.types.is_list(data_type) and pa.types.is_primitive(data_type.value_type):
            values = max(1, int(pc.max(pc.list_value_length(column)).as_py() or 1))
            data_type = data_type.value_type
        if pa.types.is_primitive(data_type):
            width += values * max(1, data_type.bit_width // 8)
        else:
            # Encoded bytes, text, images and nested arrays: their mean size in this batch.
            width += column.nbytes // max(1, table.num_rows)
    return width


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    return [field.name for field in schema if not _is_floating(field.type)]


def _is_floating(data_type: pa.DataType) -> bool:
    while pa.types.is_list(data_type) or pa.types.is_fixed_size_list(data_type):
        data_type = data_type.value_type
    return pa.types.is_floating(data_type)


def write_partition(job: WriteJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: split rows by the validation flag, write each split's rows, report the files."""
    from pyspark import TaskContext

    partition = TaskContext.get().partitionId()
    fs = job.store.filesystem()
    writers: dict[str, RowGroupWriter] = {}
    for split, directory in job.split_paths.items():
        fs.makedirs(directory, exist_ok=True)
        name = f"part-{partition:05d}-{uuid.uuid4().hex[:12]}.parquet"
        writers[split] = RowGroupWriter(fs, posixpath.join(directory, name))
    counter = ColumnCounter(job.stats, partition) if job.stats is not None else None
    try:
        for batch in batches:
            table = pa.Table.from_batches([batch])
            if counter is not None:
                counter.add(batch)
            if table.num_rows and not writers["train"].row_group_rows:
                group_rows = job.group_rows_for(table.select(list(range(len(job.column_names)))))
                for writer in writers.values():
                    writer.row_group_rows = group_rows
            is_validation = table.column(VALIDATION_FLAG) if VALIDATION_FLAG in table.column_names else None
            table = table.select(list(range(len(job.column_names)))).rename_columns(list(job.column_names))
            if is_validation is not None:
                if "val" in writers:
                    writers["val"].write(table.filter(is_validation))
                table = table.filter(pc.invert(is_validation))
            writers["train"].write(table)
        reports = [(split, posixpath.basename(writer.path), writer.close()) for split, writer in writers.items()]
    except BaseException:
        for writer in writers.values():
            writer.abort()
        raise
    written = [(*report, None) for report in reports if report[2]]
    if counter is not None:
        written.append((STATS_REPORT, "", [], json.dumps(counter.stats)))
    yield pa.RecordBatch.from_arrays(
        [pa.array([r[0] for r in written], pa.string()), pa.array([r[1] for r in written], pa.string()),
         pa.array([r[2] for r in written], pa.list_(pa.int64())), pa.array([r[3] for r in written], pa.string())],
        schema=REPORT_SCHEMA)
