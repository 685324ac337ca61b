"""materialize on real Spark (local[2]) into real Parquet, on the local disk and on S3 (moto), read back."""

from __future__ import annotations

import os
import posixpath

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

from pyspark.ml.linalg import Vectors, VectorUDT  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from spark_hvd.data import (  # noqa: E402
    check_input, check_schema, make_reader, materialize, materialize_checked, steps_per_epoch,
)
from spark_hvd.data.materialized import METADATA_NAME  # noqa: E402
from spark_hvd.errors import InputError  # noqa: E402
from spark_hvd.store import Store  # noqa: E402
from split_helpers import files_under, one_pass  # noqa: E402

pytestmark = pytest.mark.spark
ROWS = 200


@pytest.fixture(scope="module")
def df(local_spark):
    """ROWS rows: id, a 3-vector [id, id/2, -id] (every 4th one sparse), a float label, a held-out flag."""
    schema = T.StructType([
        T.StructField("id", T.LongType()), T.StructField("features", VectorUDT()),
        T.StructField("label", T.FloatType()), T.StructField("held_out", T.BooleanType()),
        T.StructField("comment", T.StringType())])

    def row(i):
        values = [float(i), i / 2, -float(i)]
        vector = Vectors.sparse(3, {k: v for k, v in enumerate(values) if v}) if i % 4 == 0 else Vectors.dense(values)
        return (i, vector, i * 0.1, i % 5 == 0, f"row {i}")

    return local_spark.createDataFrame([row(i) for i in range(ROWS)], schema).repartition(3)


def read_all(data, split, size=2, columns=None):
    """Every rank's batches of an epoch (no shuffle), concatenated per column: the split in file order, once
    (the padding of the last rank's share, from the next pass, left off)."""
    batches = [batch for rank in range(size) for batch in
               make_reader(data, split, rank, size, batch_size=7, shuffle=False, seed=0, columns=columns).batches(0)]
    return {name: np.concatenate([b[name] for b in batches])[:data.rows(split)] for name in batches[0]}


def file_times(store, data):
    paths = [*data.file_paths("train"), *(data.file_paths("val") if data.val_rows else []),
             data.metadata_path()]
    return {path: os.stat(path).st_mtime_ns for path in paths}


def test_vectors_become_arrays_and_only_selected_columns_are_written(df, tmp_path):
    store = Store.create(str(tmp_path))
    specs = check_input(df, ["features"], ["label", "id"])
    data = materialize(df, store, specs, validation=None, seed=1, num_proc=2)
    assert (data.train_rows, data.val_rows, data.val_path) == (ROWS, 0, None)
    assert data.train_path == posixpath.join(store.get_train_data_path(data.key), data.version)
    schema = pq.read_schema(data.file_paths("train")[0])
    assert schema.names == ["features", "label", "id"]
    assert schema.field("features").type.value_type == pa.float64()
    got = read_all(data, "train")
    order = np.argsort(got["id"])
    ids = got["id"][order]
    assert ids.tolist() == list(range(ROWS))
    assert got["features"].dtype == np.float64 and got["features"].shape == (ROWS, 3)
    expected = np.stack([ids, ids / 2, -ids], axis=1).astype(np.float64)
    np.testing.assert_array_equal(got["features"][order], expected)
    np.testing.assert_allclose(got["label"][order], (ids * 0.1).astype(np.float32))


def test_validation_by_fraction_is_seeded(df, tmp_path):
    store = Store.create(str(tmp_path))
    specs = check_input(df, ["features"], ["id"], validation=0.3)
    first = materialize(df, store, specs, validation=0.3, seed=7, num_proc=2)
    assert first.train_rows + first.val_rows == ROWS and 20 <= first.val_rows <= 100
    val_ids = set(read_all(first, "val")["id"].tolist())
    train_ids = set(read_all(first, "train")["id"].tolist())
    assert val_ids.isdisjoint(train_ids) and len(val_ids | train_ids) == ROWS
    again = materialize(df, store, specs, validation=0.3, seed=7, num_proc=2, reuse=False)
    assert not again.reused and set(read_all(again, "val")["id"].tolist()) == val_ids
    other = materialize(df, store, specs, validation=0.3, seed=8, num_proc=2)
    assert other.key != first.key and set(read_all(other, "val")["id"].tolist()) != val_ids


def test_validation_by_column_is_not_written(df, tmp_path):
    store = Store.create(str(tmp_path))
    specs = check_input(df, ["features"], ["id"], validation="held_out")
    data = materialize(df, store, specs, validation="held_out", seed=0, num_proc=2)
    assert (data.train_rows, data.val_rows) == (160, 40)
    assert pq.read_schema(data.file_paths("val")[0]).names == ["features", "id"]
    assert sorted(read_all(data, "val")["id"].tolist()) == list(range(0, ROWS, 5))
    assert all(i % 5 for i in read_all(data, "train")["id"].tolist())
    # The seed picks no rows here, so another seed reuses the same materialisation.
    assert materialize(df, store, specs, validation="held_out", seed=5, num_proc=2).reused


def test_second_materialisation_reuses_the_first(df, tmp_path):
    store = Store.create(str(tmp_path))
    specs = check_input(df, ["features"], ["label"])
    first = materialize(df, store, specs, validation=0.2, seed=3, num_proc=2)
    times = file_times(store, first)
    second = materialize(df, store, specs, validation=0.2, seed=3, num_proc=2)
    assert second.reused and not first.reused and second == first
    assert file_times(store, second) == times
    assert store.list(store.join("intermediate_data")) == [store.get_intermediate_path(first.key)]
    # Another DataFrame, other columns or another split get their own materialisation.
    assert materialize(df.filter("id < 100"), store, specs, 0.2, 3, 2).key != first.key
    assert materialize(df, store, {"label": specs["label"]}, 0.2, 3, 2).key != first.key
    assert materialize(df, store, specs, 0.25, 3, 2).key != first.key


def test_incomplete_materialisation_is_redone(df, tmp_path):
    store = Store.create(str(tmp_path))
    specs = check_input(df, ["features"], ["id"])
    first = materialize(df, store, specs, validation=None, seed=0, num_proc=2)
    old_files = set(first.file_paths("train"))
    store.delete(first.metadata_path())                    # as if the driver died before finishing
    leftover = posixpath.join(first.train_path, "part-99999-from-a-dead-attempt.parquet")
    store.write_bytes(leftover, b"not parquet")
    redone = materialize(df, store, specs, validation=None, seed=0, num_proc=2)
    assert not redone.reused and redone.key == first.key and redone.version != first.version
    assert old_files.isdisjoint(redone.file_paths("train"))
    assert set(store.list(redone.train_path)) == set(redone.file_paths("train"))
    # The unpublished version may be another writer's, still writing: it is left alone, and read by no one.
    assert store.exists(leftover)
    assert sorted(read_all(redone, "train")["id"].tolist()) == list(range(ROWS))


def test_row_groups_have_the_requested_size(df, tmp_path):
    store = Store.create(str(tmp_path))
    specs = check_input(df, ["features"], ["id"])
    data = materialize(df, store, specs, validation=None, seed=0, num_proc=1, row_group_rows=16)
    for data_file, path in zip(data.files("train"), data.file_paths("train")):
        footer = pq.ParquetFile(path).metadata
        sizes = [footer.row_group(i).num_rows for i in range(footer.num_row_groups)]
        assert sizes == list(data_file.row_groups)
        assert all(size == 16 for size in sizes[:-1]) and 0 < sizes[-1] <= 16


def test_very_uneven_partitions_give_every_rank_rows(local_spark, tmp_path):
    """Partition 0 holds 90% of the rows; the split is rewritten into enough row groups for every rank."""
    rows = local_spark.sparkContext.parallelize([0, 1], 2).flatMap(
        lambda part: [(i, float(i)) for i in (range(900) if part == 0 else range(900, 1000))])
    uneven = local_spark.createDataFrame(rows, "id long, x double")
    sizes = uneven.rdd.glom().map(len).collect()
    assert sizes == [900, 100]
    store = Store.create(str(tmp_path))
    specs = check_input(uneven, ["x"], ["id"])
    data = materialize(uneven, store, specs, validation=None, seed=0, num_proc=2)
    assert len(data.row_groups("train")) >= 8 and set(store.list(data.train_path)) == set(data.file_paths("train"))
    readers = [make_reader(data, "train", rank, 2, batch_size=64, shuffle=True, seed=1) for rank in range(2)]
    steps = steps_per_epoch(data.train_rows, 2, 64)
    seen = [np.concatenate([batch["id"] for batch in r.batches(0)]) for r in readers]
    assert all(len(ids) == steps * 64 for ids in seen)
    assert set(np.concatenate(seen).tolist()) == set(range(1000))
    wider = materialize(uneven, store, specs, validation=None, seed=0, num_proc=4)
    assert not wider.reused and len(wider.row_groups("train")) >= 16
    # A new version, published beside the first, whose files a fit may be reading still: they stay as they were.
    assert wider.key == data.key and wider.version != data.version
    assert sorted(read_all(data, "train")["id"].tolist()) == list(range(1000))
    assert materialize(uneven, store, specs, validation=None, seed=0, num_proc=2) == wider


def test_materialise_and_read_on_s3(df, s3_endpoint):
    store = Store.create("s3://spark-hvd-tests/hvd", **s3_endpoint)
    specs = check_input(df, ["features"], ["id"], validation="held_out")
    data = materialize(df, store, specs, validation="held_out", seed=0, num_proc=2)
    assert data.train_path.startswith("s3://spark-hvd-tests/hvd/intermediate_data/")
    assert store.exists(posixpath.join(store.get_intermediate_path(data.key), METADATA_NAME))
    assert set(store.list(data.train_path)) == set(data.file_paths("train"))
    train = read_all(data, "train")
    assert sorted(train["id"].tolist()) == [i for i in range(ROWS) if i % 5]
    ids = train["id"].astype(np.float64)
    np.testing.assert_array_equal(train["features"], np.stack([ids, ids / 2, -ids], axis=1))
    assert sorted(read_all(data, "val")["id"].tolist()) == list(range(0, ROWS, 5))
    again = materialize(df, store, specs, validation="held_out", seed=0, num_proc=2)
    assert again.reused and again == data


def test_column_names_with_dots_and_spaces(local_spark, tmp_path):
    df = local_spark.createDataFrame([(float(i), [i, -i], i % 2 == 0) for i in range(40)],
                                     "`x.raw` double, `my label` array<int>, `is val` boolean")
    specs = check_input(df, ["x.raw"], ["my label"], validation="is val")
    data = materialize(df, Store.create(str(tmp_path)), specs, validation="is val", seed=0, num_proc=2)
    train = one_pass(make_reader(data, "train", 0, 1, batch_size=4, shuffle=False, seed=0))
    assert (data.train_rows, data.val_rows) == (20, 20)
    assert sorted(train["x.raw"].tolist()) == [float(i) for i in range(1, 40, 2)]
    np.testing.assert_array_equal(train["my label"][:, 0], -train["my label"][:, 1])


def spark_jobs_of(spark, action):
    """How many Spark jobs ``action()`` ran, and what it returned or raised."""
    import uuid

    sc = spark.sparkContext
    group = f"count-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "counting the jobs of one call")
    try:
        try:
            outcome = action()
        except Exception as e:  # noqa: BLE001 - the caller asserts on it
            outcome = e
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return len(sc.statusTracker().getJobIdsForGroup(group)), outcome


def test_checked_materialisation_is_one_pass_and_equal_to_check_then_write(df, local_spark, tmp_path):
    """fit()'s path: the Parquet write counts what the checks need, so it runs the Spark jobs of a bare
    write and no more (check_input and then materialize read the rows twice), and gives what the two give."""
    plan = check_schema(df, ["features"], ["label", "id"], validation="held_out")
    jobs, data = spark_jobs_of(local_spark, lambda: materialize_checked(
        df, Store.create(str(tmp_path / "one")), plan, seed=0, num_proc=2))
    assert not data.reused
    check_jobs, specs = spark_jobs_of(local_spark, lambda: check_input(df, ["features"], ["label", "id"],
                                                                      validation="held_out"))
    write_jobs, two_pass = spark_jobs_of(local_spark, lambda: materialize(
        df, Store.create(str(tmp_path / "two")), specs, validation="held_out", seed=0, num_proc=2))
    assert check_jobs >= 1 and jobs == write_jobs, (jobs, check_jobs, write_jobs)
    assert data.columns == two_pass.columns and (data.train_rows, data.val_rows) == (two_pass.train_rows,
                                                                                      two_pass.val_rows)
    for split in ("train", "val"):
        ours, theirs = read_all(data, split), read_all(two_pass, split)
        order, their_order = np.argsort(ours["id"]), np.argsort(theirs["id"])
        for name in ours:
            np.testing.assert_array_equal(ours[name][order], theirs[name][their_order])


def test_reuse_checks_again_from_the_kept_counts(local_spark, tmp_path):
    """Written with check_finite=False, the NaN rows are kept; fitting the same DataFrame with the check
    on reuses the data without a Spark job and still refuses it, naming the column."""
    nan = float("nan")
    df = local_spark.createDataFrame([(float(i) if i % 7 else nan, [1.0, float(i)], i) for i in range(50)],
                                     "x double, arr array<double>, y long")
    store = Store.create(str(tmp_path))
    lenient = materialize_checked(df, store, check_schema(df, ["x", "arr"], ["y"], check_finite=False), 0, 2)
    assert lenient.train_rows == 50 and lenient.columns["arr"].shape == (2,)
    strict = check_schema(df, ["x", "arr"], ["y"])
    jobs, outcome = spark_jobs_of(local_spark, lambda: materialize_checked(df, store, strict, 0, 2))
    assert jobs == 0 and isinstance(outcome, InputError), outcome
    assert "column 'x' has 8 row(s) with NaN or infinite values in 50 rows" in str(outcome)
    assert materialize_checked(df, store, check_schema(df, ["arr"], ["y"]), 0, 2).train_rows == 50


def test_refused_rows_leave_nothing_under_the_store(local_spark, tmp_path):
    df = local_spark.createDataFrame([([1.0, 2.0], 0), ([1.0], 1), ([3.0, 4.0], 1)], "v array<double>, y long")
    store = Store.create(str(tmp_path))
    with pytest.raises(InputError, match=r"column 'v' holds arrays of different lengths \(1 and 2 seen\)"):
        materialize_checked(df, store, check_schema(df, ["v"], ["y"]), 0, 2)
    assert files_under(store, store.join("intermediate_data")) == []
