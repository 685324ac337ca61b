"""The arrow reader and lockstep on Parquet splits written by the executor-side writer (no Spark needed)."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest

from split_helpers import one_pass, write_split
from spark_hvd.data import make_reader, steps_per_epoch
from spark_hvd.errors import ShardReadError


def ids_of(batches) -> list[int]:
    return np.concatenate([b["id"] for b in batches]).tolist()


def one_pass_ids(reader, epoch=0):
    return one_pass(reader, epoch)["id"].tolist()


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_every_row_read_exactly_once_across_ranks_in_one_order_at_any_size(store, size, shuffle):
    data = write_split(store, "k", file_rows=[37, 0, 50, 13], row_group_rows=8)
    steps = steps_per_epoch(100, size, 5)
    seen = []
    for rank in range(size):
        with make_reader(data, "train", rank, size, batch_size=5, shuffle=shuffle, seed=3,
                         shuffle_buffer_rows=16) as reader:
            assert reader.rows == 100
            seen.extend(ids_of(reader.batches(0)))
    assert len(seen) == size * steps * 5
    # The ranks' batches, rank after rank, are the epoch's order (padded from its next pass).
    with make_reader(data, "train", 0, 1, batch_size=1, shuffle=shuffle, seed=3, shuffle_buffer_rows=16) as one:
        order = ids_of(one.batches(0, steps=len(seen)))
    assert seen == order
    assert sorted(seen[:100]) == list(range(100)) and (seen[:100] == list(range(100))) != shuffle


def test_batches_have_exact_size_dtype_and_shape(store):
    data = write_split(store, "k", file_rows=[23], row_group_rows=4)
    reader = make_reader(data, "train", 0, 1, batch_size=7, shuffle=True, seed=3)
    for batch in reader.batches(0, steps=10):                          # 70 rows: three passes over 23
        assert set(batch) == {"id", "x"}
        assert batch["id"].shape == (7,) and batch["id"].dtype == np.int64
        assert batch["x"].shape == (7, 3) and batch["x"].dtype == np.float32
        ids = batch["id"].astype(np.float32)
        np.testing.assert_array_equal(batch["x"], np.stack([ids, ids + 0.5, -ids], axis=1))


def test_an_epoch_longer_than_the_data_goes_on_into_its_next_pass(store):
    data = write_split(store, "k", file_rows=[10], row_group_rows=3)
    reader = make_reader(data, "train", 0, 1, batch_size=4, shuffle=False, seed=0)
    assert ids_of(reader.batches(0, steps=5)) == [*range(10), *range(10)]


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
    second_pass = ids_of(reader.batches(0, steps=20))[100:]
    assert sorted(second_pass) == list(range(100)) and second_pass != first


def test_a_reformed_epoch_reads_what_the_last_formation_left(store):
    from spark_hvd.data.read.epoch_position import EpochPosition

    data = write_split(store, "k", file_rows=[70, 33], row_group_rows=9)
    position, trained = EpochPosition.fresh(2, 103), []
    for size, run in ((3, 2), (2, None)):
        steps = steps_per_epoch(position.pass_rows_left, size, 4)
        for rank in range(size):
            with make_reader(data, "train", rank, size, batch_size=4, shuffle=True, seed=9,
                             shuffle_buffer_rows=20) as reader:
                trained += ids_of(itertools.islice(reader.epoch_batches(position, steps), run))
        position = position.deal(size, steps, 4).after(run or steps)
    assert sorted(set(trained)) == list(range(103))
    assert len(trained) - 103 < 2 * 4                                   # padding: at most the last step's


def test_inmemory_cache_reads_each_row_group_once(store, monkeypatch):
    data = write_split(store, "k", file_rows=[30], row_group_rows=10)
    reader = make_reader(data, "train", 0, 1, batch_size=6, shuffle=True, seed=1, inmemory_cache_all=True,
                         shuffle_buffer_rows=12)
    reads = []
    original = reader._table
    monkeypatch.setattr(reader, "_table", lambda group: (reads.append(group), original(group))[1])
    batches = list(reader.batches(0, steps=20))                         # four passes
    assert len(reads) == 3
    assert sorted(ids_of(batches)[:30]) == list(range(30))
    batches[0]["id"][:] = -1                                            # the caller owns its batch
    assert min(ids_of(reader.batches(1, steps=5))) >= 0


def test_fewer_rows_than_ranks_pads_every_rank_from_the_next_passes(store):
    data = write_split(store, "k", file_rows=[2], row_group_rows=1)
    ids = [next(make_reader(data, "train", rank, 3, batch_size=2, shuffle=False, seed=0).batches(0))["id"]
           for rank in range(3)]
    assert [i.tolist() for i in ids] == [[0, 1], [0, 1], [0, 1]]


def test_reader_and_materialized_pickle(store):
    data = write_split(store, "k", file_rows=[12], row_group_rows=5)
    copy = pickle.loads(pickle.dumps(data))
    assert copy == data
    reader = make_reader(copy, "train", 1, 2, batch_size=6, shuffle=False, seed=0, columns=["x"])
    batch = next(reader.batches(0))
    assert list(batch) == ["x"] and batch["x"][:, 0].tolist() == list(range(6, 12))   # rank 1's half


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


def test_a_row_group_that_loses_rows_raises(store, monkeypatch):
    data = write_split(store, "k", file_rows=[12], row_group_rows=4)
    reader = make_reader(data, "train", 0, 1, batch_size=4, shuffle=False, seed=0)
    original = reader._table.__func__

    def short_table(self, group):
        self._groups[group] = (*self._groups[group][:2], 5)     # the metadata says 5 rows, the file has 4
        return original(self, group)

    monkeypatch.setattr(type(reader), "_table", short_table)
    with pytest.raises(ShardReadError, match=r"rank 0: row group 0 of .* returned 4 rows, but the "
                                             r"materialisation recorded 5"):
        list(reader.batches(0))


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



def test_the_order_does_not_depend_on_how_the_rows_fall_into_files_and_row_groups(store):
    one = write_split(store, "a", file_rows=[100], row_group_rows=7)
    other = write_split(store, "b", file_rows=[30, 45, 25], row_group_rows=11)
    orders = [ids_of(make_reader(data, "train", 0, 1, batch_size=10, shuffle=True, seed=2,
                                 shuffle_buffer_rows=40).batches(3)) for data in (one, other)]
    assert orders[0] == orders[1] and sorted(orders[0]) == list(range(100))
