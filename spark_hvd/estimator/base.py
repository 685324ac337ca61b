"""``HorovodEstimator``: the framework-independent ``fit(df)`` that TorchEstimator and KerasEstimator share.

fit(df) checks the input against the params, materialises the selected columns as Parquet under
the Store (reused when the same DataFrame is fitted again), lets the framework check that a
sample fits the model, launches the ranks in one barrier stage through ``spark_hvd.run`` with live
progress, and builds the framework's Model from what rank 0 returns.
"""

from __future__ import annotations

import datetime
import secrets
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

from pyspark.ml import Estimator
from pyspark.sql import DataFrame

from spark_hvd.errors import InputError
from spark_hvd.estimator.mlflow_logging import log_fit_to_mlflow
from spark_hvd.estimator.param_table import declare_params, set_defaults
from spark_hvd.estimator.params import ESTIMATOR_PARAMS, LR_SCALING_POLICIES, READERS, default_output_cols
from spark_hvd.estimator.progress import FitProgress
from spark_hvd.runner import run


@dataclass(frozen=True)
class FitPlan:
    """Everything the ranks need besides the framework's own objects; picklable."""
    data: Any                     # spark_hvd.data.Materialized
    run_id: str
    feature_cols: list[str]
    label_cols: list[str]
    sample_weight_col: str | None
    batch_size: int
    val_batch_size: int
    epochs: int
    train_steps: int
    val_steps: int
    shuffle: bool
    shuffle_buffer_size: int
    seed: int
    reader: str
    inmemory_cache_all: bool
    backward_passes_per_step: int
    learning_rate_scaling: str
    num_proc: int


class HorovodEstimator(Estimator):
    """Base of the framework estimators. A subclass provides the framework parts:

    - ``_check_framework_params()``: model, optimizer, loss are usable;
    - ``_check_sample(sample)``: one small batch (dict of numpy arrays) goes through the model
      and the loss, or raises InputError naming the column and the shapes;
    - ``_rank_fn(plan)``: the function each rank runs; rank 0 returns ``_create_model``'s input;
    - ``_create_model(plan, result, output_cols)``: the trained Model.
    """

    def __init__(self) -> None:
        super().__init__()
        set_defaults(self, ESTIMATOR_PARAMS)

    # --- the framework's part -------------------------------------------------------------
    def _check_framework_params(self) -> None:
        raise NotImplementedError

    def _check_sample(self, sample: dict[str, Any]) -> None:
        raise NotImplementedError

    def _rank_fn(self, plan: FitPlan) -> Callable[[], Any]:
        raise NotImplementedError

    def _create_model(self, plan: FitPlan, result: Any, output_cols: list[str]) -> Any:
        raise NotImplementedError

    # --- fit ------------------------------------------------------------------------------
    def _fit(self, df: DataFrame) -> Any:
        from spark_hvd.data import check_input, materialize, steps_per_epoch
        from spark_hvd.estimator.sample import read_sample
        from spark_hvd.launch_checks import describe_cluster, resolve_num_proc

        began = time.monotonic()
        feature_cols, label_cols = self._required_columns()
        self._check_common_params(label_cols)
        self._check_framework_params()
        spark = df.sparkSession
        num_proc = resolve_num_proc(self.getNumProc(), describe_cluster(spark))
        columns = check_input(df, feature_cols, label_cols, self.getSampleWeightCol(), self.getValidation())
        store = self._store_for(spark)
        seed = self.getRandomSeed()
        data = materialize(df, store, columns, self.getValidation(), seed, num_proc)
        if data.train_rows == 0:
            raise InputError("the training split is empty: every row went to validation "
                             f"(validation={self.getValidation()!r})")
        self._check_sample(read_sample(data, rows=2))
        batch_size = self.getBatchSize()
        val_batch_size = self.getValBatchSize() or batch_size
        bpps = self.getBackwardPassesPerStep()
        train_steps = steps_per_epoch(data.train_rows, num_proc, batch_size, self.getTrainStepsPerEpoch())
        # Whole accumulation windows only, so that every epoch ends on an optimizer step.
        train_steps = -(-train_steps // bpps) * bpps
        val_steps = (steps_per_epoch(data.val_rows, num_proc, val_batch_size, self.getValidationStepsPerEpoch())
                     if data.val_rows else 0)
        plan = FitPlan(
            data=data, run_id=self.getRunId() or _new_run_id(), feature_cols=feature_cols,
            label_cols=label_cols, sample_weight_col=self.getSampleWeightCol(), batch_size=batch_size,
            val_batch_size=val_batch_size, epochs=self.getEpochs(), train_steps=train_steps,
            val_steps=val_steps, shuffle=self.getShuffle(), shuffle_buffer_size=self.getShuffleBufferSize(),
            seed=seed, reader=self.getReader(), inmemory_cache_all=self.getInmemoryCacheAll(),
            backward_passes_per_step=bpps, learning_rate_scaling=self.getLearningRateScaling(),
            num_proc=num_proc)
        progress = FitProgress(plan.epochs, plan.train_steps, enabled=self.getVerbose() >= 1)
        prepared = time.monotonic()
        try:
            results = run(self._rank_fn(plan), num_proc=num_proc, spark=spark, verbose=self.getVerbose(),
                          start_timeout=self.getStartTimeout(), on_event=progress.on_event)
        finally:
            progress.close()
        output_cols = self.getOutputCols() or default_output_cols(label_cols)
        model = self._create_model(plan, results[0], output_cols)
        model._fit_timings = _timings(began, prepared, progress, time.monotonic())
        log_fit_to_mlflow(self, model)
        return model

    def _required_columns(self) -> tuple[list[str], list[str]]:
        feature_cols, label_cols = self.getFeatureCols(), self.getLabelCols()
        if not feature_cols:
            raise InputError("feature_cols is required: the columns the model reads")
        if not label_cols:
            raise InputError("label_cols is required: the columns the loss compares the outputs with")
        return feature_cols, label_cols

    def _check_common_params(self, label_cols: list[str]) -> None:
        if self.getReader() not in READERS:
            raise InputError(f"reader must be one of {READERS}, got {self.getReader()!r}")
        if self.getLearningRateScaling() not in LR_SCALING_POLICIES:
            raise InputError(f"learning_rate_scaling must be one of {LR_SCALING_POLICIES}, "
                             f"got {self.getLearningRateScaling()!r}")
        output_cols = self.getOutputCols()
        if output_cols is not None and len(output_cols) != len(label_cols):
            raise InputError(f"output_cols names {len(output_cols)} column(s) for {len(label_cols)} "
                             f"label column(s) {label_cols}")
        transformation_fn = self.getTransformationFn()
        if transformation_fn is not None and not callable(transformation_fn):
            raise InputError(f"transformation_fn must be callable, got {type(transformation_fn).__name__}")

    def _store_for(self, spark: Any) -> Any:
        from spark_hvd.store import Store

        store = self.getStore()
        if store is not None:
            return store
        master = spark.sparkContext.master
        if not master.startswith("local"):
            raise InputError(f"store is required on a cluster (master {master}): the executors must "
                             "reach the data, e.g. store=Store.create('hdfs:///tmp/hvd')")
        store = Store.create(tempfile.mkdtemp(prefix="spark-hvd-store-"))
        self.setStore(store)
        return store


def _timings(began: float, prepared: float, progress: FitProgress, ended: float) -> dict[str, float]:
    """Seconds per phase: checks and materialisation, launch until rank 0 trains, training, and the rest
    (ranks winding down, results back, the model built)."""
    started = progress.started_at if progress.started_at is not None else prepared
    finished = progress.finished_at if progress.finished_at is not None else started
    return {"materialize": prepared - began, "launch": started - prepared, "train": finished - started,
            "return": ended - finished, "total": ended - began}


def _new_run_id() -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"run-{stamp}-{secrets.token_hex(3)}"


declare_params(HorovodEstimator, ESTIMATOR_PARAMS)
