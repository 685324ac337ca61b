"""Test helpers: splits written without Spark (through the executor-side writer), and one pass of a reader."""

from __future__ import annotations

import posixpath

import numpy as np
import pyarrow as pa

from spark_hvd.data.columns import ColumnSpec
from spark_hvd.data.materialized import DataFile, Materialized
from spark_hvd.data.partition_writer import RowGroupWriter
from spark_hvd.store import Store

SPECS = {"id": ColumnSpec("id", "int64", ()), "x": ColumnSpec("x", "float32", (3,))}


def rows_table(ids: np.ndarray) -> pa.Table:
    """Row i: id=i, x=[i, i+0.5, -i] as float32 arrays."""
    x = np.stack([ids, ids + 0.5, -ids], axis=1).astype(np.float32)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "x": pa.array(list(x), pa.list_(pa.float32()))})


def write_split(store: Store, key: str, file_rows: list[int], row_group_rows: int) -> Materialized:
    """A train split of sum(file_rows) rows with ids 0..n-1, in files of the given sizes."""
    directory = store.get_train_data_path(key)
    store.filesystem().makedirs(directory, exist_ok=True)
    files, start = [], 0
    for index, rows in enumerate(file_rows):
        name = f"part-{index:05d}.parquet"
        writer = RowGroupWriter(store.filesystem(), posixpath.join(directory, name), row_group_rows)
        writer.write(rows_table(np.arange(start, start + rows)))
        files.append(DataFile(name, tuple(writer.close())))
        start += rows
    return Materialized(key=key, train_path=directory, val_path=None, train_rows=start, val_rows=0,
                        columns=dict(SPECS), store=store, train_files=tuple(files))


def one_pass(reader, epoch: int = 0) -> dict[str, np.ndarray]:
    """Exactly one pass over the reader's shard (the stream is endless: take its first reader.rows rows)."""
    batches, got, parts = reader.batches(epoch), 0, []
    while got < reader.rows:
        batch = next(batches)
        take = min(len(next(iter(batch.values()))), reader.rows - got)
        parts.append({name: array[:take] for name, array in batch.items()})
        got += take
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def files_under(store: Store, path: str) -> list[str]:
    """Every file below ``path`` (empty directories, which a refused write may leave, are not files)."""
    fs = store.filesystem()
    return sorted(fs.find(path)) if fs.exists(path) else []
