"""Rewrite a small split with smaller row groups, so that readers sharding by row group find some per rank."""

from __future__ import annotations

import posixpath
import uuid

import pyarrow.parquet as pq

from spark_hvd.data.materialized import DataFile
from spark_hvd.data.partition_writer import RowGroupWriter
from spark_hvd.store import Store


def rechunk_split(store: Store, directory: str, files: tuple[DataFile, ...], row_group_rows: int
                  ) -> tuple[DataFile, ...]:
    """Stream the split's files into one new file of row_group_rows-row groups, then drop the old files.

    Only called for splits with fewer row groups than ranks want, so it reads little; it streams one row
    group at a time all the same. Only called on a version not yet published (materialize.py), which no
    other fit reads: a published one is never changed.
    """
    fs = store.filesystem()
    name = f"part-rechunked-{uuid.uuid4().hex[:12]}.parquet"
    writer = RowGroupWriter(fs, posixpath.join(directory, name), row_group_rows)
    try:
        for data_file in files:
            with fs.open(posixpath.join(directory, data_file.name), "rb") as handle:
                parquet = pq.ParquetFile(handle)
                for index in range(parquet.num_row_groups):
                    writer.write(parquet.read_row_group(index))
        groups = writer.close()
    except BaseException:
        writer.abort()
        raise
    for data_file in files:
        store.delete(posixpath.join(directory, data_file.name))
    return (DataFile(name, tuple(groups)),)
