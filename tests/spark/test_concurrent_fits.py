"""Fits that share a Store and a DataFrame at once, and Spark ML tuning with a fixed run_id (issue #32).

Spark ML's tuning fits one DataFrame many times, ``parallelism`` at a time: every fit computes the same
materialisation key, and with Horovod's fixed ``run_id`` the same run. Each fit must train its own model on
intact data, as it does alone.
"""

from __future__ import annotations

import json
import multiprocessing

import pytest

from concurrent_driver import SLOPE, fit_in_own_session, slope_estimator, slope_rows

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def slope_df(local_spark):
    return local_spark.createDataFrame(slope_rows(64), "x double, y double").repartition(2)


def tuning_parts():
    from pyspark.ml.evaluation import RegressionEvaluator
    from pyspark.ml.tuning import ParamGridBuilder

    # The model's output column is <label>__output, typed after the label: a double here.
    evaluator = RegressionEvaluator(predictionCol="y__output", labelCol="y", metricName="rmse")
    return evaluator, lambda estimator: ParamGridBuilder().addGrid(estimator.batch_size, [4, 8]).build()


def published_versions_are_whole(store) -> None:
    """Every published materialisation names files that are all there (none was deleted under a reader)."""
    from spark_hvd.data.materialized import METADATA_NAME, Materialized

    keys = store.list(store.join("intermediate_data"))
    assert keys
    for key_dir in keys:
        data = Materialized.from_json(store, store.read_bytes(f"{key_dir}/{METADATA_NAME}"))
        for split in ("train", "val") if data.val_rows else ("train",):
            assert all(store.exists(path) for path in data.file_paths(split)), (key_dir, split)


def slopes(models) -> list[float]:
    return [model.getModel().w.item() for model in models]


def test_train_validation_split_fits_in_parallel_with_and_without_a_run_id(slope_df, store) -> None:
    from pyspark.ml.tuning import TrainValidationSplit

    from spark_hvd import RunIdReuseWarning

    evaluator, grid = tuning_parts()

    def tune(**overrides):
        estimator = slope_estimator(store, **overrides)
        return TrainValidationSplit(estimator=estimator, estimatorParamMaps=grid(estimator), evaluator=evaluator,
                                    trainRatio=0.75, parallelism=2, seed=3, collectSubModels=True).fit(slope_df)

    plain = tune()
    assert len(set(slopes(plain.subModels))) == 2          # batch sizes 4 and 8 train to different slopes
    # The two fits started together wrote their training split once, and shared it (as did the refit's).
    for key_dir in store.list(store.join("intermediate_data")):
        assert len(store.list(f"{key_dir}/train")) == 1, store.list(f"{key_dir}/train")
    assert all(abs(w - SLOPE) < 0.5 for w in slopes(plain.subModels))
    with pytest.warns(RunIdReuseWarning):
        fixed = tune(run_id="horovod-example")
    assert fixed.validationMetrics == pytest.approx(plain.validationMetrics)
    assert slopes(fixed.subModels) == pytest.approx(slopes(plain.subModels))
    assert fixed.bestModel.getModel().w.item() == pytest.approx(plain.bestModel.getModel().w.item())
    published_versions_are_whole(store)


def test_cross_validator_with_a_fixed_run_id_returns_the_model_it_returns_without(slope_df, store) -> None:
    """The issue's case: fold 2 and the final refit used to resume fold 1's finished checkpoint and return its
    model. In parallel without a run_id, one after the other with one: the same metrics, sub-models, best model."""
    from pyspark.ml.tuning import CrossValidator

    from spark_hvd import RunIdReuseWarning

    evaluator, grid = tuning_parts()

    def tune(parallelism, **overrides):
        estimator = slope_estimator(store, **overrides)
        return CrossValidator(estimator=estimator, estimatorParamMaps=grid(estimator), evaluator=evaluator,
                              numFolds=2, parallelism=parallelism, seed=3, collectSubModels=True).fit(slope_df)

    plain = tune(parallelism=2)
    fold_slopes = [slopes(fold) for fold in plain.subModels]
    assert len({w for fold in fold_slopes for w in fold}) == 4    # every fold and param map trained its own
    with pytest.warns(RunIdReuseWarning, match="belongs to another fit"):
        fixed = tune(parallelism=1, run_id="horovod-example")
    assert fixed.avgMetrics == pytest.approx(plain.avgMetrics)
    assert [slopes(fold) for fold in fixed.subModels] == [pytest.approx(fold) for fold in fold_slopes]
    assert fixed.bestModel.getModel().w.item() == pytest.approx(plain.bestModel.getModel().w.item())
    assert [m["epoch"] for m in fixed.bestModel.getEpochMetrics()] == [0, 1]
    published_versions_are_whole(store)


def test_two_drivers_fit_one_dataframe_into_one_store_at_once(spark_environment, tmp_path) -> None:
    from spark_hvd.store import Store

    store_dir = str(tmp_path / "shared-store")
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2)
    outputs = [str(tmp_path / f"driver-{index}.json") for index in range(2)]
    drivers = [context.Process(target=fit_in_own_session, args=(store_dir, out, start)) for out in outputs]
    for driver in drivers:
        driver.start()
    try:
        for driver in drivers:
            driver.join(timeout=600)
        assert [driver.exitcode for driver in drivers] == [0, 0]
    finally:
        for driver in drivers:
            if driver.is_alive():
                driver.kill()
                driver.join(timeout=30)
    results = []
    for out in outputs:
        with open(out) as f:
            results.append(json.load(f))
    # The same fit in both: the same model, each from two epochs of its own, in runs of their own.
    assert [r["epochs"] for r in results] == [2, 2]
    assert results[0]["w"] == pytest.approx(results[1]["w"]) and abs(results[0]["w"] - SLOPE) < 0.5
    assert results[0]["run_id"] != results[1]["run_id"]
    store = Store.create(store_dir)
    assert len(store.list(store.join("intermediate_data"))) == 1     # one DataFrame: one key in both drivers
    published_versions_are_whole(store)


def test_fits_of_one_dataframe_side_by_side_in_one_driver_write_its_data_once(slope_df, store, monkeypatch) -> None:
    """While one fit writes the data, a second fit of the same DataFrame waits for that write and reuses it."""
    import threading

    import importlib

    from spark_hvd.data import check_schema, materialize_checked

    # The module, not the package's function of the same name.
    materialize = importlib.import_module("spark_hvd.data.materialize")

    plan = check_schema(slope_df, ["x"], ["y"])
    writes, second = [], {}
    real_write = materialize._write

    def first_write_starts_a_second_fit(*args, **kwargs):
        writes.append(threading.current_thread().name)
        if len(writes) == 1:
            thread = threading.Thread(name="second fit", target=lambda: second.update(
                data=materialize_checked(slope_df, store, plan, seed=0, num_proc=2)))
            thread.start()
            # The second fit waits for this write: it is still waiting when the timeout ends the join.
            thread.join(timeout=5.0)
            second["waited"] = thread.is_alive()
            second["thread"] = thread
        return real_write(*args, **kwargs)

    monkeypatch.setattr(materialize, "_write", first_write_starts_a_second_fit)
    first = materialize_checked(slope_df, store, plan, seed=0, num_proc=2)
    second["thread"].join(timeout=120)
    assert writes == ["MainThread"] and second["waited"]
    assert not first.reused and second["data"].reused and second["data"].key == first.key
