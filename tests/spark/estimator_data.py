"""Synthetic DataFrames for the estimator tests: learnable, so a test can check that training worked."""

from __future__ import annotations

from typing import Any

import numpy as np


def blobs(spark: Any, rows: int, features: int = 4, classes: int = 3, seed: int = 0, partitions: int = 2) -> Any:
    """Well separated clusters: ``features`` (a Vector) and an integer ``label``; a small MLP reaches
    ~100% accuracy in a few epochs."""
    from pyspark.ml.linalg import Vectors, VectorUDT
    from pyspark.sql.types import BooleanType, LongType, StructField, StructType

    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 4, size=(classes, features))
    labels = rng.integers(0, classes, size=rows)
    points = centres[labels] + rng.normal(0, 0.5, size=(rows, features))
    data = [(Vectors.dense(p.tolist()), int(l), bool(i % 5 == 0)) for i, (p, l) in enumerate(zip(points, labels))]
    schema = StructType([StructField("features", VectorUDT()), StructField("label", LongType()),
                         StructField("is_val", BooleanType())])
    return spark.createDataFrame(data, schema).repartition(partitions)


def xor_frame(spark: Any) -> Any:
    """Horovod's create_xor_data, four times over: ``features`` (a 2-value Vector), ``y`` and ``weight`` doubles."""
    from pyspark.ml.linalg import Vectors

    rows = [(Vectors.dense([float(a), float(b)]), float(a ^ b), 1.0) for a in (0, 1) for b in (0, 1)] * 4
    return spark.createDataFrame(rows, ["features", "y", "weight"]).repartition(2)


def with_ids(df: Any) -> Any:
    """Rows with an ``id`` that stays theirs in every job: checkpointed, so no recomputation can hand
    the ids out in another order."""
    from pyspark.sql import functions as F

    return df.withColumn("id", F.monotonically_increasing_id()).localCheckpoint()


def predictions(df: Any, column: str = "label__output") -> np.ndarray:
    """One output column in id order."""
    return np.array([row[0] for row in df.orderBy("id").select(column).collect()])


def features_labels_predictions(out: Any, column: str = "label__output") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From one collect of transform's output, so the three line up row by row."""
    rows = out.orderBy("id").collect()
    return (np.array([r.features.toArray() for r in rows], dtype=np.float32), np.array([r.label for r in rows]),
            np.array([r[column] for r in rows]))


def in_two_partitions(df: Any, first_rows: int) -> Any:
    """The rows of df in exactly two partitions: the first ``first_rows`` rows, and the rest."""
    rdd = (df.rdd.zipWithIndex().map(lambda pair: (0 if pair[1] < first_rows else 1, pair[0]))
           .partitionBy(2, lambda key: key).values())
    return df.sparkSession.createDataFrame(rdd, df.schema)


def assert_fit_fails_before_launch(spark: Any, store: Any, make_estimator: Any, overrides: dict,
                                   data: str | None, message: str) -> None:
    """A bad-input case of the estimator tests: ``fit`` raises InputError matching ``message`` and no run
    was started under the Store. ``data``: None, or "empty" for a DataFrame without rows. A ``loss``
    in ``overrides`` comes with float labels (the label-shape case)."""
    import pytest
    from pyspark.sql import functions as F

    from spark_hvd.errors import InputError

    df = blobs(spark, 100).withColumn("name", F.lit("text"))
    if data == "empty":
        df = df.limit(0)
    if overrides.get("loss") is not None:
        df = df.withColumn("label", F.col("label").cast("double"))
    with pytest.raises(InputError, match=message):
        make_estimator(store, **overrides).fit(df)
    assert not store.exists(store.get_runs_path()) or not store.list(store.get_runs_path())


# (overrides, message) of an elastic=True fit on num_proc=2 whose bounds are refused before launch: the
# cases every elastic estimator's tests run.
BAD_ELASTIC_BOUNDS = [
    ({"min_num_proc": 3, "max_num_proc": 2}, r"min_num_proc \(3\) is greater than max_num_proc \(2\)"),
    ({"min_num_proc": 3, "max_num_proc": 4}, r"min_num_proc \(3\) is greater than num_proc \(2\)"),
    ({"max_num_proc": 1}, r"max_num_proc \(1\) is less than num_proc \(2\)"),
]
