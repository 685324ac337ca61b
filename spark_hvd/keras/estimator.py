"""``KerasEstimator``: ``fit(df)`` trains a Keras 3 model on num_proc ranks (mirrors horovod.spark.keras;
driver side)."""

from __future__ import annotations

from typing import Any

import cloudpickle
from pyspark import keyword_only

from spark_hvd.errors import InputError
from spark_hvd.estimator.base import FitPlan, HorovodEstimator
from spark_hvd.estimator.batch_transform import InputSpec
from spark_hvd.estimator.param_table import set_defaults
from spark_hvd.keras.model import KerasModel
from spark_hvd.keras.params import KERAS_PARAMS, KERAS_REPLACEMENTS, KerasParams
from spark_hvd.keras.trainer import KerasHooks, KerasObjects, KerasRankSpec
from spark_hvd.recipe.rank_recipe import RANK_MODULES, RecipeRankFn


class KerasEstimator(HorovodEstimator, KerasParams):
    """Trains a Keras 3 ``model`` (TensorFlow backend) with ``optimizer``, ``loss`` and ``metrics`` on
    the rows of a DataFrame, as Horovod's KerasEstimator does.

    ``optimizer`` is a Keras optimizer or its name (default: the compiled model's own), ``loss`` a Keras
    loss, its name or a function (a list for several outputs), ``metrics`` what ``model.compile`` takes.
    Each rank reads an even share of the materialised rows and runs ``batch_size`` rows per step with
    ``model.fit``; gradients are averaged across ranks by ``collective.keras.DistributedOptimizer`` every
    step (every ``backward_passes_per_step`` passes, averaged over the passes too). Floating and boolean
    columns become ``keras.config.floatx()``, integer columns stay integers. Each feature column is
    reshaped to its model input's shape (a flat 784-vector feeds a ``(28, 28, 1)`` Input), several are
    passed as a tuple; each label to ``label_shapes`` when given, else to its output's shape when the sizes
    agree (a class-index label, integer or float, stays as it is for a sparse loss). Before launch a
    two-row sample goes through the model and Keras's own compiled loss and metrics, so what fails there
    is what ``model.fit`` would refuse.

    The ranks run ``callbacks=`` after Horovod's broadcast and metric-average callbacks, then, on rank
    0, ``checkpoint_callback`` (a ModelCheckpoint or ``collective.keras.callbacks.BestModelCheckpoint``;
    its filepath is the run's), whose last saved model is the one returned: the best one, for
    ``BestModelCheckpoint``. ``getHistory()`` is Keras's dict of lists (``{'loss': [...], 'val_loss':
    [...], ...}``), averaged across ranks.

    Learning rate: the ranks multiply the optimizer's rate by num_proc (``learning_rate_scaling=
    'linear'``, Horovod's rule; ``'none'`` keeps it), and start Horovod's ``LearningRateScheduleCallback``s
    from that rate; the checkpoints and the returned model hold the rate divided again. Checkpoints: rank 0
    saves the model in the native ``.keras`` format (weights and optimizer state) under the Store after
    every epoch; fitting the same fit again with the same ``run_id`` (estimator/run_claim.py) resumes after
    the last completed epoch, with the checkpoint_callback's best model and value. Custom layers, losses and
    metrics go in ``custom_objects``.
    ``elastic=True`` (with ``min_num_proc``, ``max_num_proc``, ``elastic_commit_steps``) fits through
    ``spark_hvd.run_elastic``: a lost executor costs the steps since the last commit (docs/elastic.md).
    """

    # Horovod's KerasEstimator rounds a training epoch up: ceil(rows / (batch_size * num_proc)).
    whole_training_batches = False
    # Keywords of the other estimators get Keras's answer rather than a guess at a similar name.
    param_replacements = KERAS_REPLACEMENTS

    warm_modules = ("tensorflow", "keras", "collective.keras", "spark_hvd.keras.trainer", *RANK_MODULES)
    elastic_supported = True

    @keyword_only
    def __init__(self, *, num_proc: int | None = None, model: Any = None, backend: Any = None, store: Any = None,
                 custom_objects: Any = None, optimizer: Any = None, loss: Any = None, loss_weights: Any = None,
                 sample_weight_col: str | None = None, gradient_compression: Any = None, metrics: Any = None,
                 feature_cols: Any = None, label_cols: Any = None, validation: Any = None, callbacks: Any = None,
                 batch_size: int | None = None, val_batch_size: int | None = None, epochs: int | None = None,
                 verbose: int | None = None, random_seed: int | None = None, shuffle_buffer_size: int | None = None,
                 shuffle: bool = True, partitions_per_process: int | None = None, run_id: str | None = None,
                 train_steps_per_epoch: int | None = None, validation_steps_per_epoch: int | None = None,
                 transformation_fn: Any = None, train_reader_num_workers: int | None = None,
                 val_reader_num_workers: int | None = None, reader_pool_type: str = "thread",
                 label_shapes: Any = None, checkpoint_callback: Any = None, inmemory_cache_all: bool = False,
                 backend_env: Any = None, use_gpu: bool = True, mp_start_method: str | None = None,
                 transformation_edit_fields: Any = None, transformation_removed_fields: Any = None,
                 tensorflow_dataset_prefetch_buffer_size: int | None = None, backward_passes_per_step: int = 1,
                 reader: str = "arrow", learning_rate_scaling: str = "linear", output_cols: Any = None,
                 start_timeout: float = 600.0, elastic: bool = False,
                 min_num_proc: int | None = None, max_num_proc: int | None = None,
                 elastic_commit_steps: int | None = None, checkpoint_every_steps: int | None = None,
                 **unknown: Any) -> None:
        super().__init__()
        set_defaults(self, KERAS_PARAMS)
        self._set_init_params(self._input_kwargs)
        self._sample: Any = None      # what the sample check resolved, for _rank_fn and _create_model

    @keyword_only
    def setParams(self, **kwargs: Any) -> "KerasEstimator":
        """Sets any of the constructor's keyword parameters."""
        self._set_init_params(self._input_kwargs)
        return self

    # --- the framework's part -------------------------------------------------------------
    def _optimizer(self) -> Any:
        """The optimizer param, else the compiled model's own (Horovod's fallback)."""
        optimizer = self.getOptimizer()
        if optimizer is None:
            optimizer = getattr(self.getModel(), "optimizer", None)
        return optimizer

    def _scores_implied_by_loss(self) -> str | None:
        from spark_hvd.keras.loss_scores import scores_implied_by

        return scores_implied_by(self.getLoss())

    def _check_framework_params(self) -> None:
        import keras

        if not isinstance(self.getModel(), keras.Model):
            raise InputError(f"model must be a keras.Model, got {type(self.getModel()).__name__}")
        optimizer = self._optimizer()
        if optimizer is None:
            raise InputError("optimizer is required: give optimizer=, or a model compiled with one")
        if isinstance(optimizer, str):
            try:
                optimizer = keras.optimizers.get(optimizer)
            except ValueError as e:
                raise InputError(f"optimizer {optimizer!r} is not a Keras optimizer name: {e}") from e
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise InputError(f"optimizer must be a Keras optimizer or its name, got {type(optimizer).__name__}")
        if self.getLearningRateScaling() == "linear" and not isinstance(optimizer.get_config()["learning_rate"],
                                                                         float):
            raise InputError("learning_rate_scaling='linear' needs a constant learning rate; this optimizer's is a "
                             "schedule (scale the schedule itself and use learning_rate_scaling='none')")
        if self.getLoss() is None:
            raise InputError("loss is required")
        custom_objects = self.getOrDefault(self.custom_objects)
        if custom_objects is not None and not isinstance(custom_objects, dict):
            raise InputError(f"custom_objects must be a dict of name -> object, got {type(custom_objects).__name__}")
        callbacks = self.getCallbacks() or []
        if not isinstance(callbacks, (list, tuple)) or not all(isinstance(c, keras.callbacks.Callback)
                                                                for c in callbacks):
            raise InputError(f"callbacks must be a list of keras.callbacks.Callback, got {callbacks!r}")
        checkpoint = self.getCheckpointCallback()
        if checkpoint is not None and not isinstance(checkpoint, keras.callbacks.ModelCheckpoint):
            raise InputError("checkpoint_callback must be a keras.callbacks.ModelCheckpoint (e.g. collective.keras."
                             f"callbacks.BestModelCheckpoint), got {type(checkpoint).__name__}")

    def _transformation(self) -> tuple[Any, Any, Any] | None:
        fn = self.getTransformationFn()
        return None if fn is None else (fn, self.getTransformationEditFields(), self.getTransformationRemovedFields())

    def _check_sample(self, sample: dict[str, Any]) -> None:
        from spark_hvd.data.feed.transformation import apply_transformation, require_model_ready
        from spark_hvd.keras.saving import model_to_bytes
        from spark_hvd.keras.sample_check import CompileArgs, check_sample

        transformation = self._transformation()
        if transformation is not None:
            sample = apply_transformation(sample, *transformation)
        require_model_ready(sample, [*self.getFeatureCols(), *self.getLabelCols(),
                                     *filter(None, [self.getSampleWeightCol()])])
        model_bytes = model_to_bytes(self.getModel())
        result = check_sample(
            self.getModel(), model_bytes, sample, self.getFeatureCols(), self.getLabelCols(),
            self.getSampleWeightCol(), self.getLabelShapes(),
            CompileArgs(self.getLoss(), self.getLossWeights(), list(self.getMetrics() or []),
                        self.getCustomObjects()))
        self._sample = (model_bytes, result)

    def _identity_parts(self) -> dict[str, Any]:
        import keras

        from spark_hvd.estimator.fit_identity import described

        model, optimizer = self.getModel(), self._optimizer()
        if not isinstance(optimizer, str):
            optimizer = keras.optimizers.serialize(optimizer)
            # Keras numbers the names of the optimizers a session builds (adam, adam_1, ...).
            optimizer["config"].pop("name", None)
        # Shapes and dtypes, not the weights' names: Keras numbers those too (dense, dense_1, ...), and a model
        # built again in the same session to resume a failed fit must still be the same model.
        return {"model": [described(type(model)), *([list(w.shape), str(w.dtype)] for w in model.weights)],
                "optimizer": optimizer}

    def _rank_fn(self, plan: FitPlan) -> RecipeRankFn:
        import keras

        model_bytes, result = self._sample
        optimizer = self._optimizer()
        objects = KerasObjects(
            optimizer=optimizer if isinstance(optimizer, str) else keras.optimizers.serialize(optimizer),
            loss=self.getLoss(), loss_weights=self.getLossWeights(), metrics=list(self.getMetrics() or []),
            custom_objects=self.getCustomObjects(), transformation=self._transformation(),
            compression=self.getGradientCompression(), callbacks=list(self.getCallbacks() or []),
            checkpoint_callback=self.getCheckpointCallback(),
            prefetch=self.getTensorflowDatasetPrefetchBufferSize())
        spec = KerasRankSpec(plan=plan, model=model_bytes, objects=cloudpickle.dumps(objects), shapes=result.shapes,
                             use_gpu=self.getUseGpu())
        return RecipeRankFn(KerasHooks, spec)

    def _create_model(self, plan: FitPlan, result: Any, output_cols: list[str]) -> KerasModel:
        import keras

        from spark_hvd.keras.history import keras_history
        from spark_hvd.keras.saving import loading_objects

        columns = plan.data.columns
        model = KerasModel(feature_columns=plan.feature_cols, label_columns=plan.label_cols, output_cols=output_cols,
                           run_id=plan.run_id, _floatx=keras.config.floatx())
        model._set_keras_model(result["model"],
                               loading_objects(self.getCustomObjects(), self.getLoss(), self.getMetrics()))
        model._set_training_outcome(
            keras_history(result["history"]),
            [InputSpec(c, columns[c].dtype, tuple(columns[c].shape), columns[c].kind) for c in plan.feature_cols],
            self._output_specs(plan, output_cols, self._sample[1].output_shapes), result["history"])
        model._reformations = list(result.get("reformations", []))
        return model
