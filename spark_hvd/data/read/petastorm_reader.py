"""reader="petastorm": Petastorm's make_batch_reader, one reader per pass, every pass's rows counted.

Petastorm numbers the split's row groups in file-name order and gives rank r those whose number is r modulo
the world size, so this rank's row count is known before reading; a pass that returns a different count
(Petastorm's silent empty epochs) raises instead of letting the ranks disagree on steps and hang.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

import numpy as np

from spark_hvd.data.materialized import Materialized
from spark_hvd.data.read.row_chunks import Chunk
from spark_hvd.data.read.shard_reader import ShardReader
from spark_hvd.errors import InputError


def import_petastorm() -> Any:
    try:
        import petastorm
    except ImportError as error:
        raise ImportError(f"reader='petastorm' needs Petastorm, which cannot be imported ({error}); install the "
                          "extra: pip install 'spark-hvd[petastorm]' (it needs pyarrow 14 and pyspark 4.0; "
                          "the default reader='arrow' needs neither)") from error
    return petastorm


def petastorm_shard_rows(row_groups: list[int], rank: int, size: int) -> int:
    return sum(rows for index, rows in enumerate(row_groups) if index % size == rank)


class PetastormShardReader(ShardReader):
    def __init__(self, data: Materialized, split: str, rank: int, size: int, *, columns: list[str],
                 batch_size: int, shuffle: bool, seed: int | None, shuffle_buffer_rows: int,
                 reader_options: Mapping[str, Any] | None = None) -> None:
        self._petastorm = import_petastorm()
        row_groups = data.row_groups(split)
        if len(row_groups) < size:
            raise InputError(f"reader='petastorm' shards by row group, and the {split} split has "
                             f"{len(row_groups)} row group(s) for {size} ranks; use reader='arrow', or more data")
        super().__init__([data.columns[name] for name in columns], petastorm_shard_rows(row_groups, rank, size),
                         rank=rank, split=split, batch_size=batch_size, shuffle=shuffle, seed=seed,
                         shuffle_buffer_rows=shuffle_buffer_rows)
        self._url = data.store.url(data.path(split))
        self._storage_options = data.store.storage_options or None
        self._columns = columns
        self._size = size
        self._options = dict(reader_options or {})
        self._open_readers: set[Any] = set()      # of passes still running, stopped by close()
        fixed = {"schema_fields", "reader_pool_type", "num_epochs", "cur_shard", "shard_count"} & set(self._options)
        if fixed:
            raise ValueError(f"reader_options may not set {sorted(fixed)}: the reader sets them")

    def _read_pass(self, rng: np.random.Generator | None) -> Iterator[Chunk]:
        # 'dummy' reads in this thread: the thread pool is where Petastorm's empty epochs came from.
        reader = self._petastorm.make_batch_reader(
            self._url, schema_fields=self._columns, reader_pool_type="dummy", num_epochs=1,
            cur_shard=self.rank, shard_count=self._size, shuffle_row_groups=rng is not None,
            seed=int(rng.integers(2**31)) if rng is not None else None,
            storage_options=self._storage_options, **self._options)
        self._open_readers.add(reader)
        try:
            for batch in reader:
                yield {spec.name: _as_array(getattr(batch, spec.name), spec.shape, spec.dtype)
                       for spec in self.specs}
        finally:
            self._stop(reader)

    def close(self) -> None:
        for reader in list(self._open_readers):
            self._stop(reader)

    def _stop(self, reader: Any) -> None:
        if reader in self._open_readers:
            self._open_readers.discard(reader)
            reader.stop()
            reader.join()


def _as_array(values: Any, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Petastorm gives list columns as an array of per-row arrays; stack them into (rows, *shape)."""
    array = np.asarray(values)
    if shape and array.dtype == object:
        array = np.stack(list(array)) if len(array) else np.empty((0, *shape))
    return array.reshape((len(array), *shape)).astype(dtype, copy=False)
