"""reader="petastorm": Petastorm's make_batch_reader, one reader per pass, every pass's rows counted.

Petastorm numbers the split's row groups in file-name order and gives rank r those whose number is r modulo
the world size, so this rank's row count is known before reading; a pass that returns a different count
(Petastorm's silent empty epochs) raises instead of letting the ranks disagree on steps and hang.

Its shards follow the world size, so it is not ``exact``: it cannot read a share of an epoch's order that a
formation deals (epoch_position.py). A rank reads its shard pass after pass, each reshuffled from (seed,
epoch, pass); an epoch resumed mid-way reads again and drops the batches trained before, which gives the
very same rows at the same world size, and other rows at another (docs/elastic.md).
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator, Mapping

import numpy as np

from spark_hvd.data.materialized import Materialized
from spark_hvd.data.read.row_chunks import Chunk, RowQueue, chunk_rows, shuffled
from spark_hvd.data.read.shard_reader import ShardReader
from spark_hvd.errors import InputError, ShardReadError


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
    exact = False

    def __init__(self, data: Materialized, split: str, rank: int, size: int, *, columns: list[str],
                 batch_size: int, shuffle: bool, seed: int | None, shuffle_buffer_rows: int,
                 reader_options: Mapping[str, Any] | None = None) -> None:
        self._petastorm = import_petastorm()
        row_groups = data.row_groups(split)
        if len(row_groups) < size:
            raise InputError(f"reader='petastorm' shards by row group, and the {split} split has "
                             f"{len(row_groups)} row group(s) for {size} ranks; use reader='arrow', or more data")
        super().__init__([data.columns[name] for name in columns], petastorm_shard_rows(row_groups, rank, size),
                         rank=rank, size=size, split=split, batch_size=batch_size, shuffle=shuffle, seed=seed,
                         shuffle_buffer_rows=shuffle_buffer_rows)
        self._url = data.store.url(data.path(split))
        self._storage_options = data.store.storage_options or None
        self._columns = columns
        self._options = dict(reader_options or {})
        self._open_readers: set[Any] = set()      # of passes still running, stopped by close()
        fixed = {"schema_fields", "reader_pool_type", "num_epochs", "cur_shard", "shard_count"} & set(self._options)
        if fixed:
            raise ValueError(f"reader_options may not set {sorted(fixed)}: the reader sets them")

    def batches(self, epoch: int, steps: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        """An endless stream of batch_size-row batches of this rank's shard for this epoch (the first
        ``steps`` where given), wrapping around the shard: each pass reshuffled from (seed, epoch, pass)."""
        stream = self._endless(epoch)
        return stream if steps is None else itertools.islice(stream, steps)

    def _endless(self, epoch: int) -> Iterator[dict[str, np.ndarray]]:
        queue = RowQueue()
        for pass_index in itertools.count():
            rng = np.random.default_rng(None if self.seed is None else [self.seed & 0xFFFFFFFF, epoch, pass_index])
            chunks = self._read_pass(rng if self.shuffle else None)
            if self.shuffle:
                chunks = shuffled(chunks, rng, self.shuffle_buffer_rows)
            read = 0
            for chunk in chunks:
                read += chunk_rows(chunk)
                queue.append(chunk)
                while queue.rows >= self.batch_size:
                    yield queue.take(self.batch_size)
            self._check_pass(read, epoch, pass_index)

    def _check_pass(self, read: int, epoch: int, pass_index: int) -> None:
        if read != self.rows:
            raise ShardReadError(
                f"rank {self.rank}: a pass over its {self.split} shard returned {read} rows, but the shard "
                f"holds {self.rows} (epoch {epoch}, pass {pass_index}); the reader lost data, and training "
                "would desynchronise the ranks")

    def _read_pass(self, rng: np.random.Generator | None) -> Iterator[Chunk]:
        # 'dummy' reads in this thread: the thread pool is where Petastorm's empty epochs came from.
        reader = self._petastorm.make_batch_reader(
            self._url, schema_fields=self._columns, reader_pool_type="dummy", num_epochs=1,
            cur_shard=self.rank, shard_count=self.size, shuffle_row_groups=rng is not None,
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
