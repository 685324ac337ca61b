"""The default reader: pyarrow.dataset over the Store's filesystem, reading any stretch of an epoch's order.

What a rank reads is its share of what its formation deals (epoch_position.py): positions of the epoch's
order (epoch_order.py), which name rows of the split. Unshuffled, a share is a contiguous range of the files;
shuffled, it is a run of windows, each read as the rows it needs of the row groups it draws from.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pyarrow.dataset as ds

from spark_hvd.data.materialized import Materialized
from spark_hvd.data.read.epoch_order import EpochOrder, Gather, Run
from spark_hvd.data.read.row_chunks import Chunk, concat, table_to_chunk, take
from spark_hvd.data.read.shard_reader import ShardReader
from spark_hvd.errors import ShardReadError


class ArrowShardReader(ShardReader):
    def __init__(self, data: Materialized, split: str, rank: int, size: int, *, columns: list[str],
                 batch_size: int, shuffle: bool, seed: int | None, shuffle_buffer_rows: int,
                 inmemory_cache_all: bool) -> None:
        super().__init__([data.columns[name] for name in columns], data.rows(split), rank=rank, size=size,
                         split=split, batch_size=batch_size, shuffle=shuffle, seed=seed,
                         shuffle_buffer_rows=shuffle_buffer_rows)
        self._columns = columns
        files = data.files(split)
        # Row groups numbered across the files, in file order: (file index, row group in it, rows).
        self._groups = [(index, group, rows) for index, data_file in enumerate(files)
                        for group, rows in enumerate(data_file.row_groups)]
        self._group_starts = np.concatenate([[0], np.cumsum([rows for _, _, rows in self._groups], dtype=np.int64)])
        self.order = EpochOrder(self.rows, shuffle, seed, shuffle_buffer_rows)
        self._arrow_fs, _ = data.store.arrow_filesystem()
        self._paths = [data.store.to_fs_path(path) for path in data.file_paths(split)]
        self._fragments: dict[int, Any] = {}      # file index -> fragment with its footer loaded
        self._cache: dict[int, Chunk] | None = {} if inmemory_cache_all else None

    def _read(self, epoch: int, start: int, stop: int) -> Iterator[Chunk]:
        for stretch in self.order.stretches(epoch, start, stop):
            if isinstance(stretch, Run):
                yield from self._run(stretch)
            else:
                yield self._gather(stretch)

    def _run(self, run: Run) -> Iterator[Chunk]:
        """The run's rows, row group by row group."""
        group = int(np.searchsorted(self._group_starts, run.start, side="right")) - 1
        start = run.start
        while start < run.stop:
            first, end = int(self._group_starts[group]), min(run.stop, int(self._group_starts[group + 1]))
            if end > start:
                yield self._slice(group, start - first, end - first)
            start, group = max(start, end), group + 1

    def _slice(self, group: int, start: int, stop: int) -> Chunk:
        if self._cache is not None:
            return {name: array[start:stop] for name, array in self._cached(group).items()}
        return table_to_chunk(self._table(group).slice(start, stop - start), self.specs)

    def _gather(self, gather: Gather) -> Chunk:
        """The gathered rows, each row group read once: by group, then back into position order."""
        groups_of = np.searchsorted(self._group_starts, gather.rows, side="right") - 1
        by_group = np.argsort(groups_of, kind="stable")
        groups = groups_of[by_group]
        firsts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
        bounds = [*firsts.tolist(), len(groups)]
        parts = [self._rows(int(groups[low]), gather.rows[by_group[low:high]] - self._group_starts[groups[low]])
                 for low, high in zip(bounds[:-1], bounds[1:])]
        in_position_order = np.empty_like(by_group)
        in_position_order[by_group] = np.arange(len(by_group))
        return take(concat(parts), in_position_order)

    def _rows(self, group: int, rows: np.ndarray) -> Chunk:
        if self._cache is not None:
            return take(self._cached(group), rows)
        return table_to_chunk(self._table(group).take(rows), self.specs)

    def _cached(self, group: int) -> Chunk:
        chunk = self._cache.get(group)
        if chunk is None:
            chunk = self._cache[group] = table_to_chunk(self._table(group), self.specs)
        return chunk

    def _table(self, group: int) -> Any:
        file_index, row_group, rows = self._groups[group]
        table = self._fragment(file_index).subset(row_group_ids=[row_group]).to_table(columns=self._columns)
        if table.num_rows != rows:
            raise ShardReadError(
                f"rank {self.rank}: row group {row_group} of {self._paths[file_index]} ({self.split} split) "
                f"returned {table.num_rows} rows, but the materialisation recorded {rows}; the reader lost "
                "data, and training would desynchronise the ranks")
        return table

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
