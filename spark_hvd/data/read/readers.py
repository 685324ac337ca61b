"""make_reader: the ShardReader for one rank and one split, by reader name."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from spark_hvd.data.read.arrow_reader import ArrowShardReader
from spark_hvd.data.columns import ColumnSpec
from spark_hvd.data.materialized import Materialized
from spark_hvd.data.read.petastorm_reader import PetastormShardReader
from spark_hvd.data.read.shard_reader import ShardReader
from spark_hvd.errors import InputError

READERS = ("arrow", "petastorm")
# The default shuffle buffer holds about this much; wide rows (images) get fewer rows than narrow ones.
DEFAULT_SHUFFLE_BUFFER_BYTES = 64 * 1024 * 1024


def check_reader_columns(reader: str, specs: Sequence[ColumnSpec]) -> None:
    """InputError when ``reader`` cannot carry a column: Petastorm reads numbers of one shape per column."""
    if reader != "petastorm":
        return
    arrow_only = [spec for spec in specs if spec.kind == "nested" or spec.encoded]
    if arrow_only:
        listed = ", ".join(f"{spec.name!r} ({spec.kind})" for spec in arrow_only)
        raise InputError(f"reader='petastorm' reads numeric scalars, fixed-length arrays and vectors; column(s) "
                         f"{listed} need the default reader='arrow'")


def make_reader(data: Materialized, split: str, rank: int, size: int, batch_size: int, shuffle: bool,
                seed: int | None, reader: str = "arrow", shuffle_buffer_rows: int | None = None,
                inmemory_cache_all: bool = False, columns: Sequence[str] | None = None,
                reader_options: Mapping[str, Any] | None = None) -> ShardReader:
    """This rank's reader of `split` ("train" or "val"); columns default to every materialised column.

    shuffle_buffer_rows: rows held by the shuffle buffer; default as many as fit in 64 MiB (at least a batch).
    reader_options go to petastorm.make_batch_reader (reader="petastorm" only), e.g. a predicate.
    """
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in a world of size {size}")
    data.path(split)           # a clear error for an unknown split, or a missing validation split
    names = list(columns) if columns is not None else list(data.columns)
    unknown = [name for name in names if name not in data.columns]
    if unknown:
        raise ValueError(f"column(s) {unknown} were not materialised; there are: {list(data.columns)}")
    if shuffle_buffer_rows is None:
        row_bytes = max(1, sum(data.columns[name].row_bytes for name in names))
        shuffle_buffer_rows = max(batch_size, DEFAULT_SHUFFLE_BUFFER_BYTES // row_bytes)
    common = dict(columns=names, batch_size=batch_size, shuffle=shuffle, seed=seed,
                  shuffle_buffer_rows=shuffle_buffer_rows)
    if reader == "arrow":
        if reader_options:
            raise ValueError(f"reader_options {sorted(reader_options)} are for reader='petastorm'")
        return ArrowShardReader(data, split, rank, size, inmemory_cache_all=inmemory_cache_all, **common)
    if reader == "petastorm":
        check_reader_columns(reader, [data.columns[name] for name in names])
        return PetastormShardReader(data, split, rank, size, reader_options=reader_options, **common)
    raise ValueError(f"reader must be one of {READERS}, got {reader!r}")
