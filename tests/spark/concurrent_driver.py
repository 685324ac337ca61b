"""A driver process of its own (started by test_concurrent_fits.py with multiprocessing's spawn): its own local
Spark session fits a Parquet table into a Store that another such driver fits the same table into at once."""

from __future__ import annotations

import json
from typing import Any

SLOPE = 2.0


def slope_rows(rows: int) -> list[tuple[float, float]]:
    """y = 2x over x in [-1, 1], so that a fit's learned slope says it trained."""
    return [(x, SLOPE * x) for x in (-1 + 2 * i / (rows - 1) for i in range(rows))]


def generated_slope_df(spark: Any, rows: int = 64) -> Any:
    """slope_rows as a plan of Spark's own (a range), whose materialisation key is the same in every driver:
    a DataFrame read from files or made from Python rows has a semantic hash of that driver's alone."""
    x = f"cast(id as double) * {2 / (rows - 1)!r} - 1.0"
    return spark.range(rows).selectExpr(f"{x} as x", f"{SLOPE!r} * ({x}) as y").repartition(2)


def slope_estimator(store: Any, **overrides: Any) -> Any:
    import torch

    from estimator_models import Slope
    from spark_hvd.torch import TorchEstimator

    model = Slope()
    settings = dict(num_proc=1, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.3),
                    loss=torch.nn.MSELoss(), feature_cols=["x"], label_cols=["y"], batch_size=4, epochs=2,
                    random_seed=1, store=store, verbose=0)
    settings.update(overrides)
    return TorchEstimator(**settings)


def fit_in_own_session(store_dir: str, out_path: str, start: Any) -> None:
    """Fits generated_slope_df; waits at ``start`` (a multiprocessing Barrier) with its session up and its
    DataFrame made, so that both drivers fit at once."""
    import estimator_models
    from by_value import pickled_by_value
    from pyspark.sql import SparkSession

    from spark_conf import COMMON_CONF
    from spark_hvd.store import Store

    builder = SparkSession.builder.master("local[1]").appName("spark_hvd-concurrent-driver")
    for key, value in COMMON_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        with pickled_by_value(estimator_models):
            estimator = slope_estimator(Store.create(store_dir))
            df = generated_slope_df(spark)
            start.wait(timeout=300)
            model = estimator.fit(df)
        with open(out_path, "w") as out:
            json.dump({"w": model.getModel().w.item(), "epochs": len(model.getEpochMetrics()),
                       "run_id": model.getRunId(), "materialized": model._fit_timings["materialize"]}, out)
    finally:
        spark.stop()
