"""The parts of materialize that need no Spark: row-group sizing, leftover files, rechunking."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from split_helpers import SPECS, one_pass, write_split
from spark_hvd.data import ColumnSpec, make_reader
from spark_hvd.data.materialize import _remove_unreported, _row_group_rows, _with_enough_row_groups
from spark_hvd.errors import InputError


def test_row_groups_sized_by_bytes_or_rows():
    wide = {"image": ColumnSpec("image", "float32", (3, 32, 32)), "label": ColumnSpec("label", "int64", ())}
    assert _row_group_rows(wide, None, 4 * 1024 * 1024) == 4 * 1024 * 1024 // (3 * 32 * 32 * 4 + 8)
    assert _row_group_rows(SPECS, None, 1) == 1
    assert _row_group_rows(SPECS, 500, 1) == 500
    assert _row_group_rows(SPECS, 10**9, 1) == 1024 * 1024            # pyarrow's own ceiling
    with pytest.raises(InputError, match="row_group_rows must be at least 1"):
        _row_group_rows(SPECS, 0, 1)


def test_files_of_failed_attempts_are_removed(store):
    """A task attempt that died after writing leaves a file no report names; it must not join the data."""
    data = write_split(store, "k", file_rows=[5, 5], row_group_rows=5)
    dead_attempt = store.join("intermediate_data", "k", "train", "part-00001-deadbeef.parquet")
    store.write_bytes(dead_attempt, b"half a file")
    _remove_unreported(store, data.train_path, {f.name for f in data.files("train")})
    assert store.list(data.train_path) == data.file_paths("train")


def test_small_split_is_rechunked_for_the_ranks(store):
    data = write_split(store, "k", file_rows=[90, 10], row_group_rows=1000)
    assert data.row_groups("train") == [90, 10]
    wider = _with_enough_row_groups(data, num_proc=3)                   # 3 ranks want 12 row groups
    assert wider.row_groups("train") == [9] * 11 + [1]
    assert store.list(wider.train_path) == wider.file_paths("train")  # the old files are gone
    footer = pq.ParquetFile(wider.file_paths("train")[0]).metadata
    assert [footer.row_group(i).num_rows for i in range(footer.num_row_groups)] == wider.row_groups("train")
    assert sorted(one_pass(make_reader(wider, "train", 0, 1, 8, False, 0))["id"].tolist()) == list(range(100))
    assert _with_enough_row_groups(wider, num_proc=3) is wider
