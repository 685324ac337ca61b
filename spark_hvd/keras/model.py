"""``KerasModel``: the trained Keras model as a Spark ML Model (mirrors horovod.spark.keras.KerasModel;
driver side, and the predictor that runs in the executors' transform tasks)."""

from __future__ import annotations

from typing import Any, Callable

import cloudpickle
import numpy as np
from pyspark import keyword_only

from spark_hvd.estimator.model_base import EpochTimesGetter, HorovodModel
from spark_hvd.estimator.param_table import ParamSpec, declare_params, set_defaults

_MODEL_FILE = "model.keras"                 # the native Keras format: architecture, weights, optimizer
_CUSTOM_OBJECTS_FILE = "custom_objects.pkl"  # cloudpickle of what Keras needs to load it, by name

KERAS_MODEL_PARAMS: list[ParamSpec] = [
    ParamSpec("custom_objects", "dict of name -> class or function Keras needs to load the model; default {}",
              None),
    ParamSpec("_floatx", "the Keras float type (keras.config.floatx()) floating features are given to the "
              "model in; default float32", None),
]


class KerasModel(EpochTimesGetter, HorovodModel):
    """``transform(df)`` adds one prediction column per label (``<label>__output`` unless ``output_cols``
    says otherwise), typed after the label column (see batch_transform); each feature column is reshaped to
    its model input's shape, as in training. ``getModel()`` is the trained ``keras.Model`` (compiled, with
    its optimizer's state and the unscaled learning rate); ``getHistory()`` Keras's dict of lists
    (``{'loss': [...], 'val_loss': [...], ...}``, averaged across ranks).

    Constructed directly, as Horovod's ``KerasModel(history=..., model=..., feature_columns=...,
    label_columns=..., custom_objects=..., run_id=...)``, it wraps a trained keras.Model without a fit;
    the input specs are then read off the DataFrame and the output shapes off one prediction, at the
    first transform.
    """

    @keyword_only
    def __init__(self, *, history: Any = None, model: Any = None, feature_columns: Any = None,
                 label_columns: Any = None, custom_objects: Any = None, run_id: str | None = None,
                 _metadata: Any = None, _floatx: str | None = None, output_cols: Any = None,
                 transform_batch_size: int | None = None) -> None:
        super().__init__()
        set_defaults(self, KERAS_MODEL_PARAMS)
        self._model_bytes: bytes = b""
        self._model: Any = None
        kwargs = dict(self._input_kwargs)
        model = kwargs.pop("model", None)
        history = kwargs.pop("history", None)
        kwargs.pop("_metadata", None)   # Horovod's internal column metadata; read off the DataFrame here
        self._set(**{name: value for name, value in kwargs.items() if value is not None})
        if model is not None:
            self.setModel(model)
        if history is not None:
            self._history = history
        if self.getLabelColumns() and not self.isSet(self.output_cols):
            self._set(output_cols=[f"{label}__output" for label in self.getLabelColumns()])

    def getModel(self) -> Any:
        """The keras.Model (loaded from its bytes once, on first use)."""
        if self._model is None and self._model_bytes:
            from spark_hvd.keras.saving import model_from_bytes

            self._model = model_from_bytes(self._model_bytes, self.getCustomObjects(), compile=True)
        return self._model

    def setModel(self, model: Any) -> "KerasModel":
        """Wraps a keras.Model; transform() and save() use it as it is now."""
        from spark_hvd.keras.saving import model_to_bytes

        self._model_bytes = model_to_bytes(model)
        self._model = model
        return self

    def getCustomObjects(self) -> dict[str, Any]:
        return dict(self.getOrDefault(self.custom_objects) or {})

    def _set_keras_model(self, model_bytes: bytes, custom_objects: dict[str, Any]) -> None:
        self._model_bytes = model_bytes
        self._set(custom_objects=dict(custom_objects))
        self._model = None

    def _floatx_or_default(self) -> str:
        import keras

        return self.getOrDefault(self._floatx) or keras.config.floatx()

    def _predict_factory(self) -> Callable[[], Callable[[list[np.ndarray]], list[np.ndarray]]]:
        if not self._model_bytes:
            raise ValueError("KerasModel has no model: construct it with model=..., or get it from "
                             "KerasEstimator.fit")
        return _KerasPredictorFactory(self._model_bytes, cloudpickle.dumps(self.getCustomObjects()),
                                      self._floatx_or_default())

    def _json_params(self) -> dict[str, Any]:
        # custom_objects are code, saved with the model's files; the float type is plain metadata.
        return {**super()._json_params(), "_floatx": self.getOrDefault(self._floatx)}

    def _save_data(self, fs: Any, directory: str) -> None:
        with fs.open(f"{directory}/{_MODEL_FILE}", "wb") as f:
            f.write(self._model_bytes)
        with fs.open(f"{directory}/{_CUSTOM_OBJECTS_FILE}", "wb") as f:
            f.write(cloudpickle.dumps(self.getCustomObjects()))

    def _load_data(self, fs: Any, directory: str) -> None:
        with fs.open(f"{directory}/{_MODEL_FILE}", "rb") as f:
            model_bytes = f.read()
        with fs.open(f"{directory}/{_CUSTOM_OBJECTS_FILE}", "rb") as f:
            custom_objects = cloudpickle.loads(f.read())
        self._set_keras_model(model_bytes, custom_objects)

    def _copy_internals_to(self, other: HorovodModel) -> None:
        super()._copy_internals_to(other)
        other._model_bytes = self._model_bytes
        other._model = self._model


class _KerasPredictorFactory:
    """Shipped to the executors; loads the model once per partition (each a separate Python task).
    Loaded without its compile config: predicting needs neither the loss nor the optimizer."""

    def __init__(self, model_bytes: bytes, custom_objects_blob: bytes, floatx: str) -> None:
        self.model_bytes, self.custom_objects_blob, self.floatx = model_bytes, custom_objects_blob, floatx

    def __call__(self) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        from spark_hvd.keras.batch_arrays import as_outputs, column_array, model_input_shapes, model_inputs
        from spark_hvd.keras.saving import model_from_bytes

        model = model_from_bytes(self.model_bytes, cloudpickle.loads(self.custom_objects_blob), compile=False)
        floatx = self.floatx

        def predict(features: list[np.ndarray]) -> list[np.ndarray]:
            x = model_inputs([column_array(f, floatx) for f in features], model_input_shapes(model, len(features)))
            return [output.astype(np.float64, copy=False) for output in as_outputs(model.predict_on_batch(x))]

        return predict


declare_params(KerasModel, KERAS_MODEL_PARAMS)
