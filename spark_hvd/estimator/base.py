"""Driver: ``HorovodEstimator``, the framework-independent ``fit(df)`` that TorchEstimator and KerasEstimator share.

fit(df) reads check -> materialise -> backend.run -> model: it checks the params and the input's schema,
materialises the selected columns as Parquet under the Store while counting what the row checks need in the
same pass (reused when the same DataFrame is fitted again), lets the framework check that a sample fits the
model, runs the ranks through its Backend, the one door to the launcher (a SparkBackend: one barrier stage
through ``spark_hvd.run``), with live progress, and builds the framework's Model from what rank 0 returns.
"""

from __future__ import annotations

import datetime
import secrets
import tempfile
import time
from typing import Any, Callable, Iterator, Sequence

from pyspark.ml import Estimator
from pyspark.ml.util import MLReadable, MLReader, MLWritable, MLWriter
from pyspark.sql import DataFrame

from spark_hvd.common.backend import Backend, FitLaunch, SparkBackend
from spark_hvd.data.validation_split import normalized_validation
from spark_hvd.errors import InputError
from spark_hvd.estimator.classifier_outputs import (
    CLASSIFIER_PARAM_NAMES,
    CLASSIFIER_PARAMS,
    resolved_classification,
)
from spark_hvd.estimator.elastic_plan import check_no_elastic_params, checked_elastic_bounds
from spark_hvd.estimator.epoch_listeners import epoch_callback
from spark_hvd.estimator.fit_context import active_mlflow_parent, current_fit_context
from spark_hvd.estimator.fit_identity import TRAINING_PARAMS, FitIdentity, identity_of
from spark_hvd.estimator.mlflow_logging import start_mlflow_fit_log
from spark_hvd.estimator.param_table import declare_params, set_defaults
from spark_hvd.estimator.params import ESTIMATOR_PARAMS, LR_SCALING_POLICIES, READERS, default_output_cols
from spark_hvd.estimator.progress import FitProgress, FitStatus
from spark_hvd.estimator.run_claim import claim_run
from spark_hvd.estimator.tuned_fits import TunedFits
from spark_hvd.estimator.unused_params import warn_unused_params
from spark_hvd.recipe.plan import ElasticPlan, EpochSteps, FitPlan


class HorovodEstimator(Estimator, MLWritable, MLReadable):
    """Base of the framework estimators. A subclass provides the framework parts:

    - ``_check_framework_params()``: model, optimizer, loss are usable;
    - ``_check_sample(sample)``: one small batch (dict of numpy arrays) goes through the model
      and the loss, or raises InputError naming the column and the shapes;
    - ``_rank_fn(plan)``: the function each rank runs; rank 0 returns ``_create_model``'s input;
    - ``_create_model(plan, result, output_cols)``: the trained Model.
    """

    # Horovod's torch and Lightning estimators round a training epoch down to whole batches per rank;
    # its Keras estimator rounds up. A subclass says which it follows.
    whole_training_batches = True
    # Keywords of other estimators or libraries -> what to use here, beside the shared table.
    param_replacements: dict[str, str] = {}
    # What the rank processes import (the framework): each Spark worker keeps a spare process that imported
    # them for the next fit (spark_hvd.run's keep_warm), so a fit's launch does not wait for the import.
    warm_modules: tuple[str, ...] = ()
    # Whether _rank_fn trains under hvd.elastic when the plan is elastic (elastic=True).
    elastic_supported = False

    def __init__(self) -> None:
        super().__init__()
        set_defaults(self, [*ESTIMATOR_PARAMS, *CLASSIFIER_PARAMS])

    def _set_init_params(self, kwargs: dict[str, Any]) -> None:
        """The constructor's keywords: each must name a Param (an unknown one fails, naming it)."""
        from spark_hvd.estimator.unknown_params import param_names, reject_unknown

        reject_unknown(type(self).__name__, kwargs, param_names(self), self.param_replacements)
        # None means "the default" throughout Horovod's signatures.
        self._set(**{name: value for name, value in kwargs.items() if value is not None})

    # --- persistence of the unfitted estimator (a Pipeline holding it saves and loads) ----------
    def write(self) -> MLWriter:
        from spark_hvd.estimator.estimator_persistence import EstimatorWriter

        return EstimatorWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        from spark_hvd.estimator.estimator_persistence import EstimatorReader

        return EstimatorReader(cls)

    def _output_specs(self, plan: FitPlan, output_cols: list[str],
                      output_shapes: list[tuple[int, ...]]) -> list[Any]:
        """What transform() adds per label: the output's shape, typed after the label column."""
        from spark_hvd.estimator.batch_transform import OutputSpec

        columns = plan.data.columns
        return [OutputSpec(column, tuple(shape), columns[label].kind, columns[label].dtype)
                for column, shape, label in zip(output_cols, output_shapes, plan.label_cols)]

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
    def fitMultiple(self, dataset: DataFrame, paramMaps: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        """Spark ML's tuning entry (CrossValidator, TrainValidationSplit, ``fit(df, [maps])``): one fit per param
        map, drawn from any thread; each fit's progress lines carry its param map, and under an active MLflow
        run each fit logs to a run of its own nested under it (tuned_fits.py)."""
        return TunedFits(self.copy(), dataset, paramMaps, active_mlflow_parent())

    def _fit(self, df: DataFrame) -> Any:
        """check -> materialise -> backend.run -> model."""
        from spark_hvd.common.util import DEFAULT_SPLIT_SEED
        from spark_hvd.data import materialize_checked

        began = time.monotonic()
        spark = df.sparkSession
        status = FitStatus(enabled=self.getVerbose() >= 1, label=_fit_label())
        plan = self._check_input(df, status)
        store = self._store_for(spark)
        # The backend for this fit: its ranks counted once; their processes start (and import the framework)
        # while the data is written.
        with self._backend(spark).for_fit(self._fit_launch(spark, status, warm_up=True)) as backend:
            self._check_elastic(backend)
            # One pass over the rows: the Parquet write counts what the row checks need (nulls, lengths, NaN).
            status.phase("checking the rows and materialising the columns as Parquet under the Store")
            data = materialize_checked(df, store, plan, self._seed(DEFAULT_SPLIT_SEED), backend.num_processes())
            status.done(f"{'reusing' if data.reused else 'materialised'} {data.train_rows} training and "
                        f"{data.val_rows} validation rows")
            return self._fit_on_materialized(data, backend, began, status)

    def fit_on_parquet(self, params: dict | None = None, dataset_idx: str | None = None) -> Any:
        """Trains on data materialised before by ``spark_hvd.common.util.prepare_data`` (Horovod's API):
        ``dataset_idx`` is what prepare_data yielded; default, the last one prepared under the Store."""
        from pyspark.sql import SparkSession

        from spark_hvd.data.prepared import load_prepared

        if params:
            return self.copy(params).fit_on_parquet(dataset_idx=dataset_idx)
        began = time.monotonic()
        feature_cols, label_cols = self._required_columns()
        self._check_params(label_cols)
        store = self.getStore()
        if store is None:
            raise InputError("fit_on_parquet needs the store that prepare_data wrote to: set store=")
        data = load_prepared(store, dataset_idx)
        missing = [c for c in [*feature_cols, *label_cols, *filter(None, [self.getSampleWeightCol()])]
                   if c not in data.columns]
        if missing:
            raise InputError(f"fit_on_parquet: column(s) {missing} were not prepared; dataset {data.key!r} "
                             f"holds {list(data.columns)}")
        spark = SparkSession.active()
        status = FitStatus(enabled=self.getVerbose() >= 1, label=_fit_label())
        with self._backend(spark).for_fit(self._fit_launch(spark, status, warm_up=False)) as backend:
            self._check_elastic(backend)
            return self._fit_on_materialized(data, backend, began, status)

    def _check_input(self, df: DataFrame, status: FitStatus) -> Any:
        """The params, then the DataFrame's schema against them: the columns' plan of the materialisation."""
        from spark_hvd.data import check_schema

        feature_cols, label_cols = self._required_columns()
        self._check_params(label_cols)
        status.phase("checking the input columns")
        # Arrays of varying lengths (token ids) are taken where a transformation_fn can pad them, and its rows
        # carry a binaryFile DataFrame's path (which also names a file that fails to decode).
        transforms = self.getTransformationFn() is not None
        plan = check_schema(df, feature_cols, label_cols, self.getSampleWeightCol(),
                            normalized_validation(self.getValidation()), check_finite=self.getCheckFinite(),
                            ragged_ok=transforms, carried=["path"] if transforms else [])
        status.done(f"input checked: {', '.join(plan.names)}")
        return plan

    def _fit_launch(self, spark: Any, status: FitStatus, warm_up: bool) -> FitLaunch:
        """What this fit asks of its backend's launch; ``warm_up``: start the ranks' processes now, while the
        fit writes its data (prestart_ranks)."""
        return FitLaunch(spark=spark, verbose=self.getVerbose(), start_timeout=self.getStartTimeout(),
                         keep_warm=self.warm_modules, on_event=status.on_event,
                         warm_up=warm_up and self.getPrestartRanks(), env=self.getBackendEnv(),
                         elastic=self._elastic_bounds(), commit_store=self.getStore())

    def _fit_on_materialized(self, data: Any, backend: Any, began: float, status: FitStatus) -> Any:
        from spark_hvd.data.read.readers import check_reader_columns
        from spark_hvd.data.feed.transformation import require_transformation_for
        from spark_hvd.estimator.sample import read_sample

        if data.train_rows == 0:
            raise InputError("the training split is empty: every row went to validation "
                             f"(validation={self.getValidation()!r})")
        # Ends when rank 0 starts training (FitProgress says so).
        status.phase(f"checking a sample against the model, launching {backend.num_processes()} ranks")
        check_reader_columns(self.getReader(), list(data.columns.values()))
        require_transformation_for(list(data.columns.values()), self.getTransformationFn())
        self._check_sample(read_sample(data, rows=2))
        identity = self._fit_identity(data)
        claim = claim_run(data.store, self.getRunId() or _new_run_id(), identity)
        try:
            return self._train(self._plan(data, backend.num_processes(), claim.run_id, identity.key), backend,
                               began, status)
        finally:
            claim.release()

    def _train(self, plan: FitPlan, backend: Any, began: float, status: FitStatus) -> Any:
        """backend.run -> model, with live progress (and MLflow's log, when a run is active)."""
        mlflow_log = start_mlflow_fit_log(self, plan.num_proc)   # None without an active MLflow run
        progress = FitProgress(plan.epochs, plan.train_steps, enabled=self.getVerbose() >= 1,
                               on_epoch=epoch_callback(None if mlflow_log is None else mlflow_log.log_epoch),
                               status=status, num_proc=plan.num_proc)
        prepared = time.monotonic()
        try:
            results = backend.run(self._rank_fn(plan), env=dict(self.getBackendEnv() or {}))
            output_cols = self.getOutputCols() or default_output_cols(plan.label_cols)
            model = self._create_model(plan, results[0], output_cols)
            # transform() applies it where a feature column was encoded (model_base.py's rule).
            model._set_fit_transformation(self.getTransformationFn(), self.getTransformationEditFields(),
                                          self.getTransformationRemovedFields())
            model._set(**self._classifier_settings())
        except BaseException as error:
            if mlflow_log is not None:
                mlflow_log.fail(error)
            raise
        finally:
            progress.close()
            _drop_run_unless_saved(plan.data.store, plan.run_id)
        model._fit_timings = _timings(began, prepared, progress, time.monotonic())
        model._epoch_times = list(results[0].get("epoch_times", [])) if isinstance(results[0], dict) else []
        if mlflow_log is not None:
            mlflow_log.log_model(model)
            mlflow_log.finish()
        return model

    def _fit_identity(self, data: Any) -> FitIdentity:
        """What makes this fit the one a checkpoint belongs to (fit_identity.py)."""
        params = {name: self.getOrDefault(name) for name in TRAINING_PARAMS if self.hasParam(name)}
        return identity_of(params, self._identity_parts(), data.key, self.getEpochs())

    def _identity_parts(self) -> dict[str, Any]:
        """The framework's part of the fit's identity: the model's structure, the optimizer, the framework's own
        training settings (JSON values, or objects fit_identity.described can describe)."""
        return {}

    def _plan(self, data: Any, num_proc: int, run_id: str | None = None, fit_key: str | None = None) -> FitPlan:
        """The ranks' plan; ``run_id``: the run the fit claimed (None, as rank-function tests build it: a new
        one)."""
        batch_size = self.getBatchSize()
        val_batch_size = self.getValBatchSize() or batch_size
        bpps = self.getBackwardPassesPerStep()
        epoch_steps = EpochSteps(data.train_rows, data.val_rows, batch_size, val_batch_size, bpps,
                                 self.whole_training_batches, self.getTrainStepsPerEpoch(),
                                 self.getValidationStepsPerEpoch())
        train_steps, val_steps = epoch_steps.at(num_proc)
        shuffle_buffer = self.getShuffleBufferSize()
        label_shapes = self.getLabelShapes()
        return FitPlan(
            data=data, run_id=run_id or _new_run_id(), fit_key=fit_key, feature_cols=self.getFeatureCols(),
            label_cols=self.getLabelCols(), sample_weight_col=self.getSampleWeightCol(), batch_size=batch_size,
            val_batch_size=val_batch_size, epochs=self.getEpochs(), train_steps=train_steps, val_steps=val_steps,
            shuffle=self.getShuffle() and shuffle_buffer != 0, shuffle_buffer_size=shuffle_buffer or None,
            seed=self._seed(0), reader=self.getReader(), inmemory_cache_all=self.getInmemoryCacheAll(),
            backward_passes_per_step=bpps, learning_rate_scaling=self.getLearningRateScaling(),
            num_proc=num_proc,
            label_shapes=[tuple(-1 if d is None else int(d) for d in shape) for shape in label_shapes]
            if label_shapes else None,
            transformation_edit_fields=self.getTransformationEditFields(),
            transformation_removed_fields=self.getTransformationRemovedFields(),
            stop_on_nonfinite_loss=self.getStopOnNonfiniteLoss(), elastic=self._elastic_plan(num_proc, epoch_steps),
            train_reader_num_workers=self.getTrainReaderNumWorkers(),
            val_reader_num_workers=self.getValReaderNumWorkers(),
            checkpoint_every_steps=_whole_windows(self.getCheckpointEverySteps(), bpps), epoch_steps=epoch_steps)

    def _scores_implied_by_loss(self) -> str | None:
        """What the model's outputs are, as its loss implies (classifier_outputs.SCORE_KINDS); None: unknown.
        A framework overrides it."""
        return None

    def _classifier_settings(self) -> dict[str, Any]:
        """The classifier params the model gets, with classification='auto' resolved from the loss."""
        settings = {name: self.getOrDefault(getattr(self, name)) for name in CLASSIFIER_PARAM_NAMES}
        settings["classification"] = resolved_classification(settings["classification"],
                                                             self._scores_implied_by_loss(), self.getLoss())
        return settings

    def _elastic_plan(self, num_proc: int, epoch_steps: EpochSteps) -> ElasticPlan | None:
        if not self.getElastic():
            return None
        min_np, max_np = checked_elastic_bounds(self, num_proc)
        commit_steps = _whole_windows(self.getElasticCommitSteps(), epoch_steps.backward_passes_per_step)
        return ElasticPlan(commit_steps, min_np, max_np, epoch_steps)

    def _elastic_bounds(self) -> tuple[int | None, int | None] | None:
        """(min_num_proc, max_num_proc) as given, for the backend's launch mode (each may be None: the ranks the
        fit starts with); None without elastic=True."""
        return (self.getMinNumProc(), self.getMaxNumProc()) if self.getElastic() else None

    def _check_elastic(self, backend: Any) -> None:
        """elastic=True's bounds against the backend's ranks, before anything is materialised or launched."""
        if not self.getElastic():
            check_no_elastic_params(self)
            return
        checked_elastic_bounds(self, backend.num_processes())

    def _seed(self, default: int) -> int:
        seed = self.getRandomSeed()
        return default if seed is None else seed

    def _backend(self, spark: Any) -> Backend:
        """The Backend that runs the ranks: the given one, or a SparkBackend of num_proc ranks."""
        backend = self.getBackend()
        if backend is None:
            return SparkBackend(num_proc=self.getNumProc(), spark=spark)
        if self.getNumProc() is not None:
            raise InputError("give at most one of num_proc and backend: the backend says how many ranks run "
                             "(SparkBackend(num_proc=...))")
        if not isinstance(backend, Backend):
            raise InputError(f"backend must be a spark_hvd.common.backend.Backend (e.g. SparkBackend(num_proc=2)), "
                             f"got {type(backend).__name__}")
        return backend

    def _check_params(self, label_cols: list[str]) -> None:
        warn_unused_params(self)
        self._check_common_params(label_cols)
        self._check_framework_params()

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
        label_shapes = self.getLabelShapes()
        if label_shapes is not None and len(label_shapes) != len(label_cols):
            raise InputError(f"label_shapes has {len(label_shapes)} shape(s) for {len(label_cols)} label "
                             f"column(s) {label_cols}")
        if self._classifier_settings()["classification"] is not None and len(label_cols) != 1:
            raise InputError(f"classification adds Spark ML's classifier columns for one label column; "
                             f"label_cols has {len(label_cols)}: {label_cols}")
        backend_env = self.getBackendEnv()
        if backend_env is not None and not (isinstance(backend_env, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in backend_env.items())):
            raise InputError(f"backend_env must be a dict of str -> str, got {backend_env!r}")

    def _store_for(self, spark: Any) -> Any:
        from spark_hvd.store import Store

        store = self.getStore()
        if store is not None:
            return store
        master = _session_master(spark)
        if master is None:
            raise InputError("store is required: the Spark session does not show spark.master, so spark_hvd "
                             "cannot tell a local session from a cluster, e.g. store=Store.create('hdfs:///tmp/hvd')")
        if not master.startswith("local"):
            raise InputError(f"store is required on a cluster (master {master}): the executors must "
                             "reach the data, e.g. store=Store.create('hdfs:///tmp/hvd')")
        store = Store.create(tempfile.mkdtemp(prefix="spark-hvd-store-"))
        self.setStore(store)
        return store


def _session_master(spark: Any) -> str | None:
    """The session's master URL (``local[2]``, ``spark://...``), read through ``spark.conf`` as a Spark Connect
    session (which has no sparkContext) allows; None when the session does not show it."""
    try:
        return spark.conf.get("spark.master", None)
    except Exception:  # noqa: BLE001 - a key the server refuses to show reads as unset
        return None


def _drop_run_unless_saved(store: Any, run_id: str) -> None:
    """Horovod's save_runs=False: the run's checkpoints and logs served the fit only (Horovod keeps them in a
    temporary directory), so none stays in the Store, whether the fit ended well or not. The run is this fit's
    alone (run_claim.py: no other fit trains in it meanwhile)."""
    if store is not None and not store.saving_runs():
        store.delete(store.get_run_path(run_id))


def _timings(began: float, prepared: float, progress: FitProgress, ended: float) -> dict[str, float]:
    """Seconds per phase: checks and materialisation, launch until rank 0 trains, training, and the rest
    (ranks winding down, results back, the model built)."""
    started = progress.started_at if progress.started_at is not None else prepared
    finished = progress.finished_at if progress.finished_at is not None else started
    return {"materialize": prepared - began, "launch": started - prepared, "train": finished - started,
            "return": ended - finished, "total": ended - began}


def _fit_label() -> str | None:
    """The label a tuner gave the fit this thread runs (its param map, its trial), for its progress lines."""
    context = current_fit_context()
    return None if context is None else context.label


def _new_run_id() -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"run-{stamp}-{secrets.token_hex(3)}"


declare_params(HorovodEstimator, [*ESTIMATOR_PARAMS, *CLASSIFIER_PARAMS])


def _whole_windows(steps: int | None, backward_passes_per_step: int) -> int | None:
    """``steps`` rounded up to whole accumulation windows, so that no commit or checkpoint falls inside one."""
    if steps is None:
        return None
    return -(-steps // backward_passes_per_step) * backward_passes_per_step
