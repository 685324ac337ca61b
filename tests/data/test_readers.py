"""The arrow reader and lockstep on Parquet splits written by the executor-side writer (no Spark needed)."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest

from split_helpers import one_pass, write_split
from spark_hvd.data import make_reader, steps_per_epoch
from spark_hvd.data.read.arrow_reader import plan_pieces, shard_range
from spark_hvd.errors import ShardReadError


def one_pass_ids(reader, epoch=0):
    return one_pass(reader, epoch)["id"].tolist()


def test_shard_ranges_cover_every_row_once():
    for total, size in [(10, 3), (7, 7), (100, 4), (5, 8), (1, 3)]:
        ranges = [shard_range(total, rank, size) for rank in range(size)]
        assert all(stop > start for start, stop in ranges)
        if total >= size:
            assert [r for start, stop in ranges for r in range(start, stop)] == list(range(total))
        else:
            assert {start for start, _ in ranges} == set(range(total))


def test_pieces_follow_row_group_boundaries():
    pieces = plan_pieces([(4, 4), (3,), (5, 1)], start=2, stop=12)
    assert [(p.file_index, p.row_group, p.start, p.stop) for p in pieces] == [
        (0, 0, 2, 4), (0, 1, 0, 4), (1, 0, 0, 3), (2, 0, 0, 1)]


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_every_row_read_exactly_once_across_ranks(store, size):
    data = write_split(store, "k", file_rows=[37, 0, 50, 13], row_group_rows=8)
    seen = []
    for rank in range(size):
        with make_reader(data, "train", rank, size, batch_size=5, shuffle=False, seed=0) as reader:
            ids = one_pass_ids(reader)
            assert ids == sorted(ids)                                   # no shuffle: file order
            seen.extend(ids)
    assert sorted(seen) == list(range(100)) and len(seen) == 100


def test_batches_have_exact_size_dtype_and_shape(store):
    data = write_split(store, "k", file_rows=[23], row_group_rows=4)
    reader = make_reader(data, "train", 0, 1, batch_size=7, shuffle=True, seed=3)
    for batch in itertools.islice(reader.batches(0), 10):               # 70 rows: wraps around 23 rows
        assert set(batch) == {"id", "x"}
        assert batch["id"].shape == (7,) and batch["id"].dtype == np.int64
        assert batch["x"].shape == (7, 3) and batch["x"].dtype == np.float32
        ids = batch["id"].astype(np.float32)
        np.testing.assert_array_equal(batch["x"], np.stack([ids, ids + 0.5, -ids], axis=1))


def test_endless_stream_wraps_around_the_shard(store):
    data = write_split(store, "k", file_rows=[10], row_group_rows=3)
    reader = make_reader(data, "train", 0, 1, batch_size=4, shuffle=False, seed=0)
    ids = np.concatenate([b["id"] for b in itertools.islice(reader.batches(0), 5)])
    assert ids.tolist() == [*range(10), *range(10)]


def test_shuffle_changes_order_keeps_the_multiset_and_is_seeded(store):
    data = write_split(store, "k", file_rows=[60, 40], row_group_rows=10)
    reader = make_reader(data, "train", 0, 1, batch_size=10, shuffle=True, seed=5, shuffle_buffer_rows=30)
    first = one_pass_ids(reader, epoch=0)
    assert sorted(first) == list(range(100)) and first != list(range(100))
    # Rows travel across row groups: some batch mixes ids from more than one group of 10.
    assert any(len({i // 10 for i in first[b:b + 10]}) > 1 for b in range(0, 100, 10))
    assert one_pass_ids(make_reader(data, "train", 0, 1, batch_size=10, shuffle=True, seed=5,
                                    shuffle_buffer_rows=30), epoch=0) == first
    assert one_pass_ids(reader, epoch=1) != first                       # a new order every epoch
    second_pass = np.concatenate([b["id"] for b in itertools.islice(reader.batches(0), 20)])[100:]
    assert sorted(second_pass.tolist()) == list(range(100)) and second_pass.tolist() != first


def test_unseeded_shuffle_still_reads_every_row(store):
    data = write_split(store, "k", file_rows=[30], row_group_rows=7)
    reader = make_reader(data, "train", 0, 1, batch_size=5, shuffle=True, seed=None, shuffle_buffer_rows=10)
    assert sorted(one_pass_ids(reader)) == list(range(30))


def test_inmemory_cache_reads_each_row_group_once(store, monkeypatch):
    data = write_split(store, "k", file_rows=[30], row_group_rows=10)
    reader = make_reader(data, "train", 0, 1, batch_size=6, shuffle=True, seed=1, inmemory_cache_all=True)
    reads = []
    original = reader._read_piece
    monkeypatch.setattr(reader, "_read_piece", lambda piece: (reads.append(piece), original(piece))[1])
    batches = list(itertools.islice(reader.batches(0), 20))              # four passes
    assert len(reads) == 3
    assert sorted(np.concatenate([b["id"] for b in batches])[:30].tolist()) == list(range(30))
    batches[0]["id"][:] = -1                                             # the caller owns its batch
    assert min(np.concatenate([b["id"] for b in itertools.islice(reader.batches(1), 5)])) >= 0


def test_fewer_rows_than_ranks_still_gives_every_rank_a_row(store):
    data = write_split(store, "k", file_rows=[2], row_group_rows=1)
    ids = [next(make_reader(data, "train", rank, 3, batch_size=2, shuffle=False, seed=0).batches(0))["id"]
           for rank in range(3)]
    assert [i.tolist() for i in ids] == [[0, 0], [1, 1], [0, 0]]


def test_reader_and_materialized_pickle(store):
    data = write_split(store, "k", file_rows=[12], row_group_rows=5)
    copy = pickle.loads(pickle.dumps(data))
    assert copy == data
    reader = make_reader(copy, "train", 1, 2, batch_size=6, shuffle=False, seed=0, columns=["x"])
    batch = next(reader.batches(0))
    assert list(batch) == ["x"] and batch["x"][:, 0].tolist() == list(range(6, 12))


def test_bad_reader_arguments_are_named(store):
    data = write_split(store, "k", file_rows=[12], row_group_rows=5)
    with pytest.raises(ValueError, match="rank 2 is not in a world of size 2"):
        make_reader(data, "train", 2, 2, batch_size=1, shuffle=False, seed=0)
    with pytest.raises(ValueError, match="no validation split"):
        make_reader(data, "val", 0, 1, batch_size=1, shuffle=False, seed=0)
    with pytest.raises(ValueError, match=r"\['nope'\] were not materialised"):
        make_reader(data, "train", 0, 1, batch_size=1, shuffle=False, seed=0, columns=["nope"])
    with pytest.raises(ValueError, match="reader must be one of"):
        make_reader(data, "train", 0, 1, batch_size=1, shuffle=False, seed=0, reader="tfrecord")
    with pytest.raises(ValueError, match="batch_size"):
        make_reader(data, "train", 0, 1, batch_size=0, shuffle=False, seed=0)


def test_a_pass_that_loses_rows_raises(store, monkeypatch):
    data = write_split(store, "k", file_rows=[12], row_group_rows=4)
    reader = make_reader(data, "train", 0, 1, batch_size=4, shuffle=False, seed=0)
    original = reader._read_pass
    monkeypatch.setattr(reader, "_read_pass", lambda rng: itertools.islice(original(rng), 2))
    with pytest.raises(ShardReadError, match=r"rank 0: a pass over its train shard returned 8 rows, but the "
                                             r"shard holds 12"):
        list(itertools.islice(reader.batches(0), 10))


def test_petastorm_without_petastorm_names_the_extra(store):
    try:
        import petastorm  # noqa: F401
        pytest.skip("petastorm is importable here")
    except ImportError:
        pass
    data = write_split(store, "k", file_rows=[12], row_group_rows=4)
    with pytest.raises(ImportError, match=r"spark-hvd\[petastorm\]"):
        make_reader(data, "train", 0, 1, batch_size=4, shuffle=False, seed=0, reader="petastorm")


@pytest.mark.parametrize("total, size, batch, requested, expected", [
    (100, 2, 10, None, 5), (101, 2, 10, None, 6), (1, 4, 64, None, 1), (0, 2, 8, None, 1),
    (100, 2, 10, 3, 3), (10**6, 8, 32, None, 3907),
])
def test_steps_per_epoch(total, size, batch, requested, expected):
    assert steps_per_epoch(total, size, batch, requested) == expected


@pytest.mark.parametrize("args", [(10, 0, 1, None), (10, 1, 0, None), (10, 1, 1, 0), (10, 1, 1, 2.5)])
def test_steps_per_epoch_rejects_bad_arguments(args):
    with pytest.raises(ValueError):
        steps_per_epoch(*args)

