"""``KerasEstimator``: ``fit(df)`` trains a Keras 3 model on num_proc ranks (mirrors horovod.spark.keras)."""

from __future__ import annotations

from typing import Any

import cloudpickle
from pyspark import keyword_only

from spark_hvd.errors import InputError
from spark_hvd.estimator.base import FitPlan, HorovodEstimator
from spark_hvd.estimator.batch_transform import InputSpec
from spark_hvd.estimator.param_table import ParamSpec, declare_params, set_defaults
from spark_hvd.keras.model import KerasModel
from spark_hvd.keras.trainer import KerasObjects, KerasRankFn, KerasRankSpec

KERAS_PARAMS: list[ParamSpec] = [
    ParamSpec("custom_objects", "dict of name -> class or function that Keras needs to load the model "
              "(custom layers, losses, metrics), as for keras.saving.load_model", None),
]


class KerasEstimator(HorovodEstimator):
    """Trains a Keras 3 ``model`` (TensorFlow backend) with ``optimizer``, ``loss`` and ``metrics`` on
    the rows of a DataFrame.

    ``optimizer`` is a Keras optimizer or its name, ``loss`` a Keras loss, its name or a function
    (a list for several outputs), ``metrics`` what ``model.compile`` takes. Each rank reads an even
    share of the materialised rows and runs ``batch_size`` rows per step with ``model.fit``;
    gradients are averaged across ranks by ``collective.keras.DistributedOptimizer`` every step (every
    ``backward_passes_per_step`` passes, averaged over the passes too). The model gets one array per
    feature column (a list when there are several); floating and boolean columns become
    ``keras.config.floatx()``, integer columns stay integers (class indices for sparse losses).
    History keys are Keras's: ``loss``, the metric names, and their ``val_`` versions, averaged
    across ranks.

    Learning rate: by default it is used as given (``learning_rate_scaling='none'``); with
    ``'linear'`` the ranks multiply it by num_proc. Checkpoints: rank 0 saves the model in the
    native ``.keras`` format (weights and optimizer state) under the Store after every epoch; fitting
    again with the same ``run_id`` resumes after the last completed epoch. Custom layers, losses and
    metrics that Keras cannot find by name go in ``custom_objects``.
    """

    @keyword_only
    def __init__(self, *, num_proc: int | None = None, model: Any = None, optimizer: Any = None, loss: Any = None,
                 loss_weights: Any = None, metrics: Any = None, feature_cols: Any = None, label_cols: Any = None,
                 sample_weight_col: str | None = None, validation: Any = None, batch_size: int = 32,
                 val_batch_size: int | None = None, epochs: int = 1, train_steps_per_epoch: int | None = None,
                 validation_steps_per_epoch: int | None = None, shuffle: bool = True,
                 shuffle_buffer_size: int = 10_000, random_seed: int = 0, store: Any = None,
                 run_id: str | None = None, backward_passes_per_step: int = 1, gradient_compression: Any = None,
                 transformation_fn: Any = None, inmemory_cache_all: bool = False, reader: str = "arrow",
                 learning_rate_scaling: str = "none", output_cols: Any = None, verbose: int = 1,
                 use_gpu: bool = True, start_timeout: float = 600.0, custom_objects: Any = None) -> None:
        super().__init__()
        set_defaults(self, KERAS_PARAMS)
        self._set(**self._input_kwargs)
        self._output_shapes: list[tuple[int, ...]] = []

    @keyword_only
    def setParams(self, **kwargs: Any) -> "KerasEstimator":
        """Sets any of the constructor's keyword parameters."""
        return self._set(**self._input_kwargs)

    def _check_framework_params(self) -> None:
        import keras

        if not isinstance(self.getModel(), keras.Model):
            raise InputError(f"model must be a keras.Model, got {type(self.getModel()).__name__}")
        optimizer = self.getOptimizer()
        if isinstance(optimizer, str):
            try:
                optimizer = keras.optimizers.get(optimizer)
            except ValueError as e:
                raise InputError(f"optimizer {self.getOptimizer()!r} is not a Keras optimizer name: {e}") from e
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise InputError(f"optimizer must be a Keras optimizer or its name, got {type(optimizer).__name__}")
        if self.getLearningRateScaling() == "linear" and not isinstance(optimizer.get_config()["learning_rate"],
                                                                         float):
            raise InputError("learning_rate_scaling='linear' needs a constant learning rate; this optimizer's is a "
                             "schedule (scale the schedule itself and use learning_rate_scaling='none')")
        if self.getLoss() is None:
            raise InputError("loss is required")
        if self.getLossConstructors() is not None:
            raise InputError("loss_constructors is for TorchEstimator; give KerasEstimator a loss")
        custom_objects = self.getCustomObjects()
        if custom_objects is not None and not isinstance(custom_objects, dict):
            raise InputError(f"custom_objects must be a dict of name -> object, got {type(custom_objects).__name__}")

    def _check_sample(self, sample: dict[str, Any]) -> None:
        import keras

        from spark_hvd.keras.batch_arrays import as_outputs, check_output_label_shapes, column_array, model_inputs

        if self.getTransformationFn() is not None:
            sample = self.getTransformationFn()(sample)
        floatx = keras.config.floatx()
        features = [column_array(sample[c], floatx) for c in self.getFeatureCols()]
        labels = [column_array(sample[c], floatx) for c in self.getLabelCols()]
        shapes = ", ".join(f"{c}: {f.shape[1:]}" for c, f in zip(self.getFeatureCols(), features))
        try:
            outputs = as_outputs(self.getModel()(model_inputs(features), training=False))
        except Exception as e:
            raise InputError(f"the model cannot take the feature columns (per-row shapes {shapes}): "
                             f"{type(e).__name__}: {e}") from e
        check_output_label_shapes(outputs, labels, self.getLabelCols())
        losses = self._losses(len(labels))
        try:
            for loss, output, label in zip(losses, outputs, labels):
                keras.losses.get(loss)(label, output)
        except Exception as e:
            raise InputError(f"the loss cannot compare the model's outputs with label column(s) "
                             f"{self.getLabelCols()}: {type(e).__name__}: {e}") from e
        self._output_shapes = [tuple(output.shape[1:]) for output in outputs]

    def _losses(self, count: int) -> list[Any]:
        loss = self.getLoss()
        losses = list(loss) if isinstance(loss, (list, tuple)) else [loss] * count
        if len(losses) != count:
            raise InputError(f"loss must be one loss, or a list with one per label column ({count}); "
                             f"got {len(losses)}")
        return losses

    def _rank_fn(self, plan: FitPlan) -> KerasRankFn:
        import keras

        from spark_hvd.keras.saving import model_to_bytes

        optimizer = self.getOptimizer()
        objects = KerasObjects(
            optimizer=optimizer if isinstance(optimizer, str) else keras.optimizers.serialize(optimizer),
            loss=self.getLoss(), loss_weights=self.getLossWeights(), metrics=list(self.getMetrics() or []),
            custom_objects=dict(self.getCustomObjects() or {}), transformation_fn=self.getTransformationFn(),
            compression=self.getGradientCompression())
        return KerasRankFn(KerasRankSpec(plan=plan, model=model_to_bytes(self.getModel()),
                                         objects=cloudpickle.dumps(objects), use_gpu=self.getUseGpu()))

    def _create_model(self, plan: FitPlan, result: Any, output_cols: list[str]) -> KerasModel:
        from spark_hvd.keras.saving import loading_objects

        columns = plan.data.columns
        model = KerasModel()
        model._set(feature_columns=plan.feature_cols, label_columns=plan.label_cols, output_cols=output_cols,
                   run_id=plan.run_id)
        model._set_keras_model(result["model"],
                               loading_objects(self.getCustomObjects(), self.getLoss(), self.getMetrics()))
        model._set_training_outcome(
            result["history"],
            [InputSpec(c, columns[c].dtype, tuple(columns[c].shape)) for c in plan.feature_cols],
            self._output_shapes)
        return model


declare_params(KerasEstimator, KERAS_PARAMS)
