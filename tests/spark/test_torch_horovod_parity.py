"""TorchEstimator behaves as horovod.spark.torch's: backend=SparkBackend, learning-rate scaling, input and
label shapes, typed prediction columns, TorchModel(...) without a fit, prepare_data + fit_on_parquet,
persistence of the unfitted estimator, train_minibatch_fn, per-row transformation_fn, and clear errors
for parameters it does not know."""

from __future__ import annotations

import sys
import warnings
from typing import Iterator

import cloudpickle
import numpy as np
import pytest
import torch
from torch import nn

from estimator_data import with_ids, xor_frame
from estimator_models import Slope, XorNet

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


@pytest.fixture(scope="module", autouse=True)
def ship_this_module() -> Iterator[None]:
    # The models and hooks below travel by value, so ranks need not import the tests.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def constant_rows(spark, rows: int = 16):
    """x = 1, y = 2 on every row: one SGD step from w = 0 on MSE moves w by exactly 4 * lr."""
    return spark.createDataFrame([(1.0, 2.0)] * rows, "x double, y double").repartition(2)


def slope_estimator(store, **overrides):
    from spark_hvd.torch import TorchEstimator

    model = Slope()
    settings = dict(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), loss=nn.MSELoss(),
                    feature_cols=["x"], label_cols=["y"], batch_size=2, epochs=1, train_steps_per_epoch=1,
                    shuffle=False, store=store, verbose=0)
    settings.update(overrides)
    return TorchEstimator(**settings)


def test_spark_backend_and_horovods_learning_rate_scaling(local_spark, store) -> None:
    from spark_hvd.common.backend import SparkBackend

    scaled = slope_estimator(store, backend=SparkBackend(num_proc=2, env={"SHVD_TEST": "1"})).fit(
        constant_rows(local_spark))
    # Horovod multiplies the learning rate by the number of ranks: 0.1 * 2 * 4.
    assert scaled.getModel().w.item() == pytest.approx(0.8)
    # The model's optimizer holds the learning rate as given, as Horovod's TorchModel does.
    assert scaled.getOptimizer().param_groups[0]["lr"] == pytest.approx(0.1)
    as_given = slope_estimator(store, num_proc=2, learning_rate_scaling="none").fit(constant_rows(local_spark))
    assert as_given.getModel().w.item() == pytest.approx(0.4)
    assert scaled.getHistory()[0]["train"]["loss"] == pytest.approx(4.0)   # (0 - 2)^2 before the step


class TwoHeads(nn.Module):
    """A conv net on a 16-value feature seen as a 1x4x4 image: a 2-vector head and a scalar head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(1, 2, kernel_size=2)
        self.vector_head = nn.Linear(18, 2)
        self.scalar_head = nn.Linear(18, 1)

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        assert image.shape[1:] == (1, 4, 4), image.shape
        hidden = self.conv(image).flatten(1)
        return self.vector_head(hidden), self.scalar_head(hidden)


def two_label_frame(spark):
    from pyspark.ml.linalg import Vectors, VectorUDT
    from pyspark.sql.types import IntegerType, StructField, StructType

    rng = np.random.default_rng(0)
    rows = [(Vectors.dense(rng.normal(size=16).tolist()), Vectors.dense([float(i % 2), 1.0]), i % 3)
            for i in range(64)]
    schema = StructType([StructField("pixels", VectorUDT()), StructField("pair", VectorUDT()),
                         StructField("count", IntegerType())])
    return spark.createDataFrame(rows, schema)


def test_input_shapes_label_shapes_and_prediction_types(local_spark, store) -> None:
    from pyspark.ml.linalg import DenseVector, VectorUDT
    from pyspark.sql.types import IntegerType

    from spark_hvd.torch import TorchEstimator, TorchModel

    df = two_label_frame(local_spark)
    model = TwoHeads()
    estimator = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                               loss=nn.MSELoss(), feature_cols=["pixels"], label_cols=["pair", "count"],
                               input_shapes=[[-1, 1, 4, 4]], label_shapes=[[-1, 2], [-1, 1]], batch_size=8,
                               epochs=1, store=store, verbose=0)
    fitted = estimator.fit(df)
    test = with_ids(df)
    out = fitted.transform(test)
    types = {f.name: f.dataType for f in out.schema.fields}
    assert isinstance(types["pair__output"], VectorUDT)          # a vector label gives a DenseVector
    assert isinstance(types["count__output"], IntegerType)       # an int label gives a (rounded) int
    rows = out.orderBy("id").collect()
    assert isinstance(rows[0].pair__output, DenseVector) and len(rows[0].pair__output) == 2
    pixels = torch.tensor(np.array([r.pixels.toArray() for r in rows]), dtype=torch.float32).reshape(-1, 1, 4, 4)
    with torch.no_grad():
        pair, count = fitted.getModel()(pixels)
    np.testing.assert_allclose([r.pair__output.toArray() for r in rows], pair.double().numpy(), rtol=1e-5, atol=1e-6)
    assert [r.count__output for r in rows] == np.rint(count.double().numpy()[:, 0]).astype(int).tolist()

    # Horovod's TorchModel(...) wraps a trained module without a fit; shapes come from the DataFrame.
    wrapped = TorchModel(model=fitted.getModel(), feature_columns=["pixels"], label_columns=["pair", "count"],
                         input_shapes=[[-1, 1, 4, 4]], history=fitted.getHistory())
    again = wrapped.transform(test).orderBy("id").collect()
    assert [r.pair__output for r in again] == [r.pair__output for r in rows]
    assert [r.count__output for r in again] == [r.count__output for r in rows]
    assert wrapped.getHistory() == fitted.getHistory()


def xor_estimator(store, **overrides):
    from spark_hvd.torch import TorchEstimator

    model = XorNet()
    settings = dict(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                    loss=nn.functional.binary_cross_entropy, input_shapes=[[2]], feature_cols=["features"],
                    label_cols=["y"], batch_size=1, epochs=1, sample_weight_col="weight", store=store, verbose=0)
    settings.update(overrides)
    return TorchEstimator(**settings)


def test_input_shapes_reshape_the_whole_batch_as_horovods(local_spark, store) -> None:
    """Horovod's test_fit_model: the entry [2] reshapes each batch, so it fits batches of one 2-value row; the
    sample check accepts that, refuses the batch sizes training would fail on, and transform feeds one row at a
    time as Horovod's does."""
    from spark_hvd.errors import InputError

    df = xor_frame(local_spark)
    fitted = xor_estimator(store).fit(df)
    prediction = fitted.getModel()(torch.ones([1, 2], dtype=torch.int32))
    assert len(prediction) == 1 and prediction.dtype == torch.float32

    rows = fitted.transform(with_ids(df)).orderBy("id").collect()
    with torch.no_grad():
        expected = [fitted.getModel()(torch.tensor(r.features.toArray())).item() for r in rows]
    assert [r.y__output for r in rows] == pytest.approx(expected)

    # Training's batches of 2 rows hold 4 values, which [2] cannot take: refused before launch.
    with pytest.raises(InputError, match=r"entry \[2\] for a batch of 2 row\(s\) \(batch_size=2\)"):
        xor_estimator(store, batch_size=2).fit(df)
    with pytest.raises(InputError, match=r"\(val_batch_size=4\)"):
        xor_estimator(store, validation=0.25, val_batch_size=4).fit(df)
    # A batch dimension of -1 fits any batch size.
    xor_estimator(store, input_shapes=[[-1, 2]], batch_size=4, validation=0.25).fit(df)


def test_horovods_store_keywords_place_the_splits_and_the_runs(local_spark, tmp_path) -> None:
    """LocalStore(..., save_runs=False) fits and leaves no run behind (it used to reach fsspec as an option and the
    runs stayed); train_path and runs_path say where the splits and the runs go, as in Horovod."""
    from spark_hvd.common.store import LocalStore

    dropped = LocalStore(str(tmp_path / "prefix"), save_runs=False, train_path=str(tmp_path / "train"))
    fitted = slope_estimator(dropped, num_proc=2, run_id="dropped").fit(constant_rows(local_spark))
    assert fitted.getModel().w.item() == pytest.approx(0.8)
    assert not dropped.exists(dropped.get_run_path("dropped"))
    assert [p.name.split(".")[0] for p in tmp_path.iterdir() if p.name.startswith("train.")] == ["train"]

    kept = LocalStore(str(tmp_path / "prefix"), runs_path=str(tmp_path / "runs"))
    slope_estimator(kept, num_proc=2, run_id="kept").fit(constant_rows(local_spark))
    assert kept.list(kept.get_checkpoint_path("kept"))
    assert kept.get_run_path("kept") == str(tmp_path / "runs" / "kept")


def test_prepare_data_then_fit_on_parquet(local_spark, store) -> None:
    from spark_hvd.common.util import prepare_data

    df = constant_rows(local_spark)
    with prepare_data(2, store, df, label_columns=["y"], feature_columns=["x"]) as dataset_idx:
        fitted = slope_estimator(store, num_proc=2).fit_on_parquet(dataset_idx=dataset_idx)
    assert fitted.getModel().w.item() == pytest.approx(0.8)
    with pytest.raises(ValueError, match="no data was prepared"):
        slope_estimator(store, num_proc=2).fit_on_parquet()


def test_unfitted_pipeline_saves_loads_and_fits(local_spark, store, tmp_path) -> None:
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import VectorAssembler

    from spark_hvd.torch import TorchEstimator

    estimator = slope_estimator(store, num_proc=2, feature_cols=["v"], output_cols=["pred"])
    pipeline = Pipeline(stages=[VectorAssembler(inputCols=["x"], outputCol="v"), estimator])
    pipeline.save(str(tmp_path / "pipeline"))
    loaded = Pipeline.load(str(tmp_path / "pipeline"))
    loaded_estimator = loaded.getStages()[1]
    assert isinstance(loaded_estimator, TorchEstimator) and loaded_estimator.uid == estimator.uid
    assert loaded_estimator.getBatchSize() == 2 and loaded_estimator.getOutputCols() == ["pred"]
    # The optimizer still drives the loaded model's own parameter.
    assert loaded_estimator.getOptimizer().param_groups[0]["params"][0] is loaded_estimator.getModel().w
    fitted = loaded.fit(constant_rows(local_spark))
    assert fitted.stages[1].getModel().w.item() == pytest.approx(0.8)


class NoStep:
    """A train_minibatch_fn that computes the gradients and never steps: the weights must not move."""

    def __call__(self, model, optimizer, transform_outputs, loss_fn, inputs, labels, sample_weights):
        optimizer.zero_grad()
        outputs, labels = transform_outputs(model(*inputs), labels)
        loss = loss_fn(outputs, labels, sample_weights)
        loss.backward()
        optimizer.synchronize()
        return outputs, loss


def one_row_at_a_time(row):
    """transformation_fn gets one row, as Horovod's (Petastorm's make_reader) does."""
    if np.shape(row["x"]) != ():
        raise AssertionError(f"transformation_fn got a batch, not a row: {np.shape(row['x'])}")
    return {**row, "y": row["y"] * 0}


def test_train_minibatch_fn_and_per_row_transformation(local_spark, store) -> None:
    fitted = slope_estimator(store, num_proc=2, train_minibatch_fn=NoStep()).fit(constant_rows(local_spark))
    assert fitted.getModel().w.item() == 0.0
    # y becomes 0 on every row, so the loss before the step is (0 - 0)^2.
    zeroed = slope_estimator(store, num_proc=2, transformation_fn=one_row_at_a_time).fit(constant_rows(local_spark))
    assert zeroed.getHistory()[0]["train"]["loss"] == 0.0


def test_unknown_and_conflicting_parameters_are_named(local_spark, store) -> None:
    from spark_hvd.common.backend import SparkBackend
    from spark_hvd.errors import InputError
    from spark_hvd.estimator.unknown_params import UnknownParamError

    with pytest.raises(UnknownParamError, match="'num_gpus': use use_gpu"):
        slope_estimator(store, num_gpus=1)
    with pytest.raises(TypeError, match="'batchsize': did you mean 'batch_size'"):
        slope_estimator(store, batchsize=4)
    with pytest.raises(InputError, match="at most one of num_proc and backend"):
        slope_estimator(store, num_proc=2, backend=SparkBackend(num_proc=2)).fit(constant_rows(local_spark))
    with pytest.raises(InputError, match="backend must be a spark_hvd.common.backend.Backend"):
        slope_estimator(store, backend="spark").fit(constant_rows(local_spark))


def test_horovod_params_without_effect_warn_once_each(local_spark, store) -> None:
    from spark_hvd.errors import InputError

    estimator = slope_estimator(store, num_proc=2, partitions_per_process=4, reader_pool_type="process",
                                feature_cols=["missing"])
    with warnings.catch_warnings(record=True) as caught, pytest.raises(InputError, match="'missing'"):
        warnings.simplefilter("always")
        estimator.fit(constant_rows(local_spark))
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert sum("partitions_per_process has no effect" in m for m in messages) == 1
    assert sum("reader_pool_type has no effect" in m for m in messages) == 1


def test_non_finite_values_stop_the_fit_before_launch_or_on_the_rank(local_spark, store) -> None:
    from spark_hvd import RunError
    from spark_hvd.errors import InputError

    poisoned = local_spark.createDataFrame([(1.0, 2.0)] * 15 + [(float("nan"), 2.0)], "x double, y double")
    with pytest.raises(InputError, match=r"column 'x' has 1 row\(s\) with NaN or infinite values"):
        slope_estimator(store, num_proc=2).fit(poisoned)
    # Past the check, the first NaN loss raises on the rank that computed it, naming epoch and step.
    with pytest.raises(RunError, match=r"NonFiniteLossError: rank \d: the training loss is nan at epoch 0, step \d"):
        slope_estimator(store, num_proc=2, check_finite=False, batch_size=8, train_steps_per_epoch=None,
                        shuffle=False).fit(poisoned.repartition(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the ranks' warning is theirs; the fit must finish
        fitted = slope_estimator(store, num_proc=2, check_finite=False, stop_on_nonfinite_loss=False,
                                 batch_size=8, train_steps_per_epoch=None).fit(poisoned.repartition(1))
    assert np.isnan(fitted.getHistory()[0]["train"]["loss"])
