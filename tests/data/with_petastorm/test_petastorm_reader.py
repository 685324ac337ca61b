"""reader="petastorm" on the pinned stack Petastorm needs (.venv-petastorm, `make petastorm-test`).

The whole data path runs here on pyspark 4.0 and pyarrow 14: materialise on local[2], then read through
Petastorm's make_batch_reader, and through the arrow reader for comparison.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

petastorm = pytest.importorskip("petastorm")

from petastorm.predicates import in_lambda  # noqa: E402
from pyspark.ml.linalg import Vectors, VectorUDT  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from spark_hvd.data import check_input, make_reader, materialize, steps_per_epoch  # noqa: E402
from spark_hvd.data.read.petastorm_reader import petastorm_shard_rows  # noqa: E402
from spark_hvd.errors import ShardReadError  # noqa: E402
from spark_hvd.store import Store  # noqa: E402
from split_helpers import one_pass  # noqa: E402

# Petastorm 0.13 uses pyarrow APIs that pyarrow 14 warns about on every read.
pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::FutureWarning")]
ROWS = 1000


@pytest.fixture(scope="module")
def data(local_spark, tmp_path_factory):
    """ROWS rows, 90% of them in one partition: id, a 4-vector [id, 2id, 3id, 4id], a 2-array label."""
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("features", VectorUDT()),
                           T.StructField("label", T.ArrayType(T.FloatType()))])
    rows = local_spark.sparkContext.parallelize([0, 1], 2).flatMap(
        lambda part: [(i, Vectors.dense([float(i * k) for k in range(1, 5)]), [float(i), -float(i)])
                      for i in (range(900) if part == 0 else range(900, ROWS))])
    df = local_spark.createDataFrame(rows, schema)
    store = Store.create(str(tmp_path_factory.mktemp("store")))
    specs = check_input(df, ["features"], ["label", "id"], validation=0.2)
    return materialize(df, store, specs, validation=0.2, seed=4, num_proc=3)


@pytest.mark.parametrize("split", ["train", "val"])
@pytest.mark.parametrize("size", [1, 2, 3])
def test_every_row_read_once_across_ranks(data, split, size):
    ids = []
    for rank in range(size):
        with make_reader(data, split, rank, size, batch_size=16, shuffle=False, seed=0,
                         reader="petastorm") as reader:
            assert reader.rows == petastorm_shard_rows(data.row_groups(split), rank, size) > 0
            got = one_pass(reader)
            assert got["features"].shape == (reader.rows, 4) and got["features"].dtype == np.float64
            assert got["label"].shape == (reader.rows, 2) and got["label"].dtype == np.float32
            expected = got["id"][:, None].astype(np.float64) * np.arange(1, 5)
            np.testing.assert_array_equal(got["features"], expected)
            np.testing.assert_array_equal(got["label"][:, 1], -got["id"].astype(np.float32))
            ids.extend(got["id"].tolist())
    arrow_ids = one_pass(make_reader(data, split, 0, 1, batch_size=16, shuffle=False, seed=0))["id"]
    assert len(ids) == data.rows(split) and sorted(ids) == sorted(arrow_ids.tolist())


def test_shuffled_endless_exact_batches(data):
    reader = make_reader(data, "train", 1, 2, batch_size=64, shuffle=True, seed=9, reader="petastorm",
                         shuffle_buffer_rows=200)
    steps = steps_per_epoch(data.train_rows, 2, 64) * 3          # wraps around the shard
    batches = list(itertools.islice(reader.batches(0), steps))
    assert all(b["id"].shape == (64,) for b in batches)
    ids = np.concatenate([b["id"] for b in batches])
    first_pass = ids[:reader.rows]
    plain = one_pass(make_reader(data, "train", 1, 2, batch_size=64, shuffle=False, seed=0, reader="petastorm"))
    assert sorted(first_pass.tolist()) == sorted(plain["id"].tolist())
    assert first_pass.tolist() != plain["id"].tolist()


def test_a_silently_empty_pass_raises(data):
    """A Petastorm reader that yields no rows and no error (here: a predicate matching nothing) must not pass."""
    reader = make_reader(data, "train", 0, 2, batch_size=8, shuffle=False, seed=0, reader="petastorm",
                         reader_options={"predicate": in_lambda(["id"], lambda ids: ids < 0)})
    with pytest.raises(ShardReadError, match=rf"rank 0: a pass over its train shard returned 0 rows, but the "
                                             rf"shard holds {reader.rows}"):
        next(reader.batches(0))


def test_a_pass_missing_rows_raises(data):
    reader = make_reader(data, "train", 1, 2, batch_size=8, shuffle=False, seed=0, reader="petastorm",
                         reader_options={"predicate": in_lambda(["id"], lambda ids: ids % 2 == 0)})
    with pytest.raises(ShardReadError, match="rank 1: a pass over its train shard returned"):
        list(itertools.islice(reader.batches(0), steps_per_epoch(data.train_rows, 2, 8) * 2))


def test_too_few_row_groups_for_petastorm_is_a_clear_error(data):
    from spark_hvd.errors import InputError

    groups = len(data.row_groups("val"))
    with pytest.raises(InputError, match=rf"val split has {groups} row group\(s\) for {groups + 1} ranks"):
        make_reader(data, "val", 0, groups + 1, batch_size=8, shuffle=False, seed=0, reader="petastorm")


def test_close_stops_a_pass_left_half_read(data):
    reader = make_reader(data, "train", 0, 2, batch_size=8, shuffle=False, seed=0, reader="petastorm")
    batches = reader.batches(0)
    next(batches)
    assert len(reader._open_readers) == 1
    reader.close()
    assert not reader._open_readers
    assert next(reader.batches(1))["id"].shape == (8,)                # still usable for the next epoch
