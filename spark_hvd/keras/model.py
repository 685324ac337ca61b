"""``KerasModel``: the trained Keras model as a Spark ML Model (mirrors horovod.spark.keras.KerasModel)."""

from __future__ import annotations

from typing import Any, Callable

import cloudpickle
import numpy as np

from spark_hvd.estimator.model_base import HorovodModel

_MODEL_FILE = "model.keras"                 # the native Keras format: architecture, weights, optimizer
_CUSTOM_OBJECTS_FILE = "custom_objects.pkl"  # cloudpickle of what Keras needs to load it, by name


class KerasModel(HorovodModel):
    """``transform(df)`` adds one prediction column per label (``<label>__output`` unless
    ``output_cols`` says otherwise): a double for a scalar output, an array of doubles otherwise.
    ``getModel()`` is the trained ``keras.Model`` (compiled, with its optimizer's state);
    ``getHistory()`` the metrics per epoch."""

    def __init__(self) -> None:
        super().__init__()
        self._model_bytes: bytes = b""
        self._custom_objects: dict[str, Any] = {}
        self._model: Any = None

    def getModel(self) -> Any:
        if self._model is None:
            from spark_hvd.keras.saving import model_from_bytes

            self._model = model_from_bytes(self._model_bytes, self._custom_objects, compile=True)
        return self._model

    def getCustomObjects(self) -> dict[str, Any]:
        return dict(self._custom_objects)

    def _set_keras_model(self, model_bytes: bytes, custom_objects: dict[str, Any]) -> None:
        self._model_bytes = model_bytes
        self._custom_objects = dict(custom_objects)
        self._model = None

    def _predict_factory(self) -> Callable[[], Callable[[list[np.ndarray]], list[np.ndarray]]]:
        return _KerasPredictorFactory(self._model_bytes, cloudpickle.dumps(self._custom_objects))

    def _save_data(self, fs: Any, directory: str) -> None:
        with fs.open(f"{directory}/{_MODEL_FILE}", "wb") as f:
            f.write(self._model_bytes)
        with fs.open(f"{directory}/{_CUSTOM_OBJECTS_FILE}", "wb") as f:
            f.write(cloudpickle.dumps(self._custom_objects))

    def _load_data(self, fs: Any, directory: str) -> None:
        with fs.open(f"{directory}/{_MODEL_FILE}", "rb") as f:
            model_bytes = f.read()
        with fs.open(f"{directory}/{_CUSTOM_OBJECTS_FILE}", "rb") as f:
            custom_objects = cloudpickle.loads(f.read())
        self._set_keras_model(model_bytes, custom_objects)

    def _copy_internals_to(self, other: HorovodModel) -> None:
        super()._copy_internals_to(other)
        other._model_bytes = self._model_bytes
        other._custom_objects = dict(self._custom_objects)
        other._model = self._model


class _KerasPredictorFactory:
    """Shipped to the executors; loads the model once per partition (each a separate Python task).
    Loaded without its compile config: predicting needs neither the loss nor the optimizer."""

    def __init__(self, model_bytes: bytes, custom_objects_blob: bytes) -> None:
        self.model_bytes, self.custom_objects_blob = model_bytes, custom_objects_blob

    def __call__(self) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        import keras

        from spark_hvd.keras.batch_arrays import as_outputs, column_array, model_inputs
        from spark_hvd.keras.saving import model_from_bytes

        model = model_from_bytes(self.model_bytes, cloudpickle.loads(self.custom_objects_blob), compile=False)
        floatx = keras.config.floatx()

        def predict(features: list[np.ndarray]) -> list[np.ndarray]:
            outputs = as_outputs(model.predict_on_batch(model_inputs([column_array(f, floatx) for f in features])))
            return [output.astype(np.float64, copy=False) for output in outputs]

        return predict
