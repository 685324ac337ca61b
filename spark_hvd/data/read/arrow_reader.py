"""The default reader: pyarrow.dataset over the Store's filesystem, each rank an even row range of the split."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pyarrow.dataset as ds

from spark_hvd.data.materialized import Materialized
from spark_hvd.data.read.row_chunks import Chunk, table_to_chunk
from spark_hvd.data.read.shard_reader import ShardReader


@dataclass(frozen=True)
class Piece:
    """Rows [start, stop) of one row group of one file."""

    file_index: int
    row_group: int
    start: int
    stop: int


def shard_range(total_rows: int, rank: int, size: int) -> tuple[int, int]:
    """Rank's rows of the split: an even contiguous range; with fewer rows than ranks, one row each."""
    if total_rows >= size:
        return rank * total_rows // size, (rank + 1) * total_rows // size
    return rank % total_rows, rank % total_rows + 1


def plan_pieces(row_groups_per_file: list[tuple[int, ...]], start: int, stop: int) -> list[Piece]:
    """The row-group slices covering global rows [start, stop), from the row counts alone."""
    pieces = []
    offset = 0
    for file_index, groups in enumerate(row_groups_per_file):
        for group, rows in enumerate(groups):
            low, high = max(start, offset), min(stop, offset + rows)
            if low < high:
                pieces.append(Piece(file_index, group, low - offset, high - offset))
            offset += rows
    return pieces


class ArrowShardReader(ShardReader):
    def __init__(self, data: Materialized, split: str, rank: int, size: int, *, columns: list[str],
                 batch_size: int, shuffle: bool, seed: int | None, shuffle_buffer_rows: int,
                 inmemory_cache_all: bool) -> None:
        start, stop = shard_range(data.rows(split), rank, size)
        super().__init__([data.columns[name] for name in columns], stop - start, rank=rank, split=split,
                         batch_size=batch_size, shuffle=shuffle, seed=seed,
                         shuffle_buffer_rows=shuffle_buffer_rows)
        self._columns = columns
        self._pieces = plan_pieces([f.row_groups for f in data.files(split)], start, stop)
        self._arrow_fs, _ = data.store.arrow_filesystem()
        self._paths = [data.store.to_fs_path(path) for path in data.file_paths(split)]
        self._fragments: dict[int, Any] = {}      # file index -> fragment with its footer loaded
        self._cache: dict[int, Chunk] | None = {} if inmemory_cache_all else None

    def _read_pass(self, rng: np.random.Generator | None) -> Iterator[Chunk]:
        order = rng.permutation(len(self._pieces)) if rng is not None else range(len(self._pieces))
        for index in order:
            if self._cache is not None and index in self._cache:
                yield self._cache[index]
                continue
            chunk = self._read_piece(self._pieces[index])
            if self._cache is not None:
                self._cache[index] = chunk
            yield chunk

    def _read_piece(self, piece: Piece) -> Chunk:
        group = self._fragment(piece.file_index).subset(row_group_ids=[piece.row_group])
        table = group.to_table(columns=self._columns)
        return table_to_chunk(table.slice(piece.start, piece.stop - piece.start), self.specs)

    def _fragment(self, file_index: int) -> Any:
        fragment = self._fragments.get(file_index)
        if fragment is None:
            fragment = ds.ParquetFileFormat().make_fragment(self._paths[file_index], filesystem=self._arrow_fs)
            fragment.ensure_complete_metadata()       # read the footer once; row groups then reuse it
            self._fragments[file_index] = fragment
        return fragment

    def close(self) -> None:
        self._fragments.clear()
        self._cache = {} if self._cache is not None else None
