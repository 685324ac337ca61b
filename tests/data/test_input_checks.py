"""check_input on real Spark DataFrames: the specs of good input, one clear InputError per kind of bad input."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from pyspark.ml.linalg import Vectors  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from spark_hvd.data import ColumnSpec, check_input, check_schema, materialize_checked  # noqa: E402
from spark_hvd.data.materialized import METADATA_NAME  # noqa: E402
from spark_hvd.errors import InputError  # noqa: E402
from spark_hvd.store import Store  # noqa: E402
from split_helpers import files_under  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(params=["check_input", "materialize_checked"])
def check(request, tmp_path):
    """The checks standalone (check_input), and as fit() runs them: counted by the Parquet write, in one pass.

    The second leaves nothing of a refused DataFrame under the Store."""
    if request.param == "check_input":
        yield check_input
        return
    store = Store.create(str(tmp_path / "store"))

    def write_and_check(df, feature_cols, label_cols, sample_weight_col=None, validation=None, check_finite=True):
        plan = check_schema(df, feature_cols, label_cols, sample_weight_col, validation, check_finite)
        return materialize_checked(df, store, plan, seed=0, num_proc=1).columns

    yield write_and_check
    # Only whole materialisations (metadata written) may stay: a refused DataFrame's files are deleted.
    for entry in store.list(store.join("intermediate_data")):
        assert store.exists(store.join(entry, METADATA_NAME)) or not files_under(store, entry), store.list(entry)


@pytest.fixture(scope="module")
def good_df(local_spark):
    from pyspark.ml.linalg import VectorUDT

    schema = T.StructType([
        T.StructField("features", VectorUDT()), T.StructField("emb", T.ArrayType(T.FloatType())),
        T.StructField("label", T.LongType()), T.StructField("weight", T.DoubleType()),
        T.StructField("is_val", T.BooleanType()), T.StructField("name", T.StringType())])
    rows = [(Vectors.dense([1.0, 2.0, 3.0]), [0.5, 1.5], 1, 0.5, False, "a"),
            (Vectors.sparse(3, {1: 4.0}), [2.5, 3.5], 0, 1.0, True, "b"),
            (Vectors.dense([0.0, 0.0, 1.0]), [4.0, 5.0], 2, 2.0, False, "c")]
    return local_spark.createDataFrame(rows, schema)


def test_specs_of_vectors_arrays_and_scalars(good_df, check):
    specs = check(good_df, ["features", "emb"], "label", sample_weight_col="weight", validation="is_val")
    assert specs == {"features": ColumnSpec("features", "float64", (3,)),
                     "emb": ColumnSpec("emb", "float32", (2,)),
                     "label": ColumnSpec("label", "int64", ()),
                     "weight": ColumnSpec("weight", "float64", ())}
    assert list(specs) == ["features", "emb", "label", "weight"]
    assert check(good_df, ["features"], ["features"]) == {
        "features": ColumnSpec("features", "float64", (3,))}


def test_missing_column_is_named_with_the_columns_that_exist(good_df, check):
    with pytest.raises(InputError, match=r"column\(s\) 'feats' not in the DataFrame; it has: features, emb, "
                                         r"label, weight, is_val, name"):
        check(good_df, ["feats"], ["label"])
    with pytest.raises(InputError, match="'held_out' not in the DataFrame"):
        check(good_df, ["features"], ["label"], validation="held_out")


def test_a_string_feature_is_taken_as_encoded_text(good_df, check):
    # Issue 31: text reaches transformation_fn as str (the estimator refuses it without one, before launch).
    spec = check(good_df, ["features", "name"], ["label"])["name"]
    assert (spec.kind, spec.dtype, spec.shape, spec.encoded) == ("string", "object", (), True)


def test_nested_arrays_arrive_with_their_shape_and_maps_are_refused_with_their_type(local_spark, check):
    df = local_spark.createDataFrame([([[1.0, 2.0]] * 3, {"a": 1}, 1)] * 2,
                                     "nested array<array<double>>, m map<string,int>, y int")
    spec = check(df, ["nested"], ["y"])["nested"]
    assert (spec.kind, spec.dtype, spec.shape) == ("nested", "float64", (3, 2))
    with pytest.raises(InputError, match=r"column 'm' has type map<string,int>, which cannot be fed to a model"):
        check(df, ["y"], ["m"])


def test_label_shape_mismatch_between_rows(local_spark, check):
    df = local_spark.createDataFrame([(1.0, [1, 0]), (2.0, [0, 1, 0]), (3.0, [1, 0])], "x double, y array<int>")
    with pytest.raises(InputError, match=r"column 'y' holds arrays of different lengths \(2 and 3 seen\)"):
        check(df, ["x"], ["y"])


def test_vector_length_mismatch_dense_and_sparse(local_spark, check):
    from pyspark.ml.linalg import VectorUDT
    schema = T.StructType([T.StructField("v", VectorUDT()), T.StructField("y", T.IntegerType())])
    df = local_spark.createDataFrame([(Vectors.dense([1.0, 2.0]), 0), (Vectors.sparse(4, {0: 1.0}), 1)], schema)
    with pytest.raises(InputError, match=r"column 'v' holds vectors of different lengths \(2 and 4 seen\)"):
        check(df, ["v"], ["y"])


def test_empty_dataframe(good_df, check):
    with pytest.raises(InputError, match="the DataFrame is empty"):
        check(good_df.limit(0), ["features"], ["label"])


def test_nulls_are_counted_and_named(local_spark, check):
    df = local_spark.createDataFrame([(1.0, 1), (None, 0), (None, 1)], "x double, y int")
    with pytest.raises(InputError, match=r"column 'x' has 2 null value\(s\) in 3 rows"):
        check(df, ["x"], ["y"])


@pytest.mark.parametrize("validation, message", [
    (-0.1, r"validation must be a fraction in \[0, 1\)"), (1.0, "fraction in"), (1.5, "fraction in"),
    (True, "fraction in"), ([0.1], "fraction in"),
    ("name", r"validation column 'name' must be boolean or numeric .*, not string"),
    ("label", "is also a feature, label or weight column"),
])
def test_bad_validation(good_df, validation, message, check):
    with pytest.raises(InputError, match=message):
        check(good_df, ["features"], ["label"], validation=validation)


def test_validation_column_that_selects_nothing_or_everything(local_spark, check):
    df = local_spark.createDataFrame([(1.0, 1, False, True), (2.0, 0, False, True)],
                                     "x double, y int, f boolean, t boolean")
    with pytest.raises(InputError, match="'f' is false on every row: no validation data"):
        check(df, ["x"], ["y"], validation="f")
    with pytest.raises(InputError, match="'t' is true on every row: no training data"):
        check(df, ["x"], ["y"], validation="t")


def test_bad_column_lists_and_weight(good_df, check):
    with pytest.raises(InputError, match="feature_cols must be a non-empty list"):
        check(good_df, [], ["label"])
    with pytest.raises(InputError, match="sample_weight_col 'emb' must be a numeric scalar column"):
        check(good_df, ["features"], ["label"], sample_weight_col="emb")
    with pytest.raises(InputError, match="validation column 'is_val' is also a feature"):
        check(good_df, ["features", "is_val"], ["label"], validation="is_val")


def test_nan_and_infinite_values_are_counted_and_named(local_spark, check):
    from pyspark.ml.linalg import VectorUDT

    schema = T.StructType([T.StructField("x", T.DoubleType()), T.StructField("arr", T.ArrayType(T.FloatType())),
                           T.StructField("v", VectorUDT()), T.StructField("y", T.LongType())])
    nan, inf = float("nan"), float("inf")
    df = local_spark.createDataFrame([(1.0, [1.0, 2.0], Vectors.dense([1.0]), 0),
                                      (nan, [inf, 2.0], Vectors.dense([nan]), 1),
                                      (-inf, [1.0, 2.0], Vectors.dense([2.0]), 1)], schema)
    with pytest.raises(InputError, match=r"column 'x' has 2 row\(s\) with NaN or infinite values in 3 rows"):
        check(df, ["x"], ["y"])
    with pytest.raises(InputError, match=r"column 'arr' has 1 row\(s\) with NaN or infinite"):
        check(df, ["arr"], ["y"])
    with pytest.raises(InputError, match=r"column 'v' has 1 row\(s\) with NaN or infinite.*check_finite=False"):
        check(df, ["v"], ["y"])
    assert set(check(df, ["x", "arr", "v"], ["y"], check_finite=False)) == {"x", "arr", "v", "y"}
