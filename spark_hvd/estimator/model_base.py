"""``HorovodModel``: the framework-independent Spark ML Model a fit returns.

``transform`` is batched (see batch_transform.py). Persistence follows Spark ML's layout, so a
model saves and loads alone or as a stage of a PipelineModel:

    <path>/metadata/   Spark's JSON metadata (class, uid, params, history, input and output specs)
    <path>/data/       the framework's own files (TorchModel: the module and its state dict)
"""

from __future__ import annotations

from typing import Any, Callable

import fsspec
import numpy as np
from pyspark.ml import Model
from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReadable, MLReader, MLWritable, MLWriter

from spark_hvd.estimator.batch_transform import InputSpec, OutputSpec, batched_transform
from spark_hvd.estimator.param_table import declare_params, set_defaults
from spark_hvd.estimator.params import MODEL_PARAMS

_DATA_DIR = "data"


class HorovodModel(Model, MLWritable, MLReadable):
    """Subclasses provide ``_predict_factory()``, ``_save_data(fs, dir)`` and ``_load_data(fs, dir)``."""

    def __init__(self) -> None:
        super().__init__()
        set_defaults(self, MODEL_PARAMS)
        self._history: list[dict[str, float]] = []
        self._input_specs: list[InputSpec] = []
        self._output_shapes: list[tuple[int, ...]] = []
        self._fit_timings: dict[str, float] = {}

    def getFitTimings(self) -> dict[str, float]:
        """Seconds per phase of the fit that made this model (materialize, launch, train, return,
        total); empty for a loaded model."""
        return dict(self._fit_timings)

    def getHistory(self) -> list[dict[str, float]]:
        """Metrics per epoch: ``[{"epoch": 0, "loss": ..., "val_loss": ..., ...}, ...]``."""
        return [dict(entry) for entry in self._history]

    def _set_training_outcome(self, history: list[dict[str, float]], input_specs: list[InputSpec],
                              output_shapes: list[tuple[int, ...]]) -> None:
        self._history = [dict(entry) for entry in history]
        self._input_specs = list(input_specs)
        self._output_shapes = [tuple(shape) for shape in output_shapes]

    # --- transform ------------------------------------------------------------------------
    def _predict_factory(self) -> Callable[[], Callable[[list[np.ndarray]], list[np.ndarray]]]:
        raise NotImplementedError

    def _transform(self, dataset: Any) -> Any:
        outputs = [OutputSpec(column, shape) for column, shape in zip(self.getOutputCols(), self._output_shapes)]
        return batched_transform(dataset, self._input_specs, outputs, self._predict_factory(),
                                 self.getTransformBatchSize())

    # --- persistence ----------------------------------------------------------------------
    def _save_data(self, fs: Any, directory: str) -> None:
        raise NotImplementedError

    def _load_data(self, fs: Any, directory: str) -> None:
        raise NotImplementedError

    def write(self) -> MLWriter:
        return _HorovodModelWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        return _HorovodModelReader(cls)

    def _json_params(self) -> dict[str, Any]:
        return {spec.name: self.getOrDefault(getattr(self, spec.name)) for spec in MODEL_PARAMS}

    def _copy_internals_to(self, other: "HorovodModel") -> None:
        other._history = [dict(entry) for entry in self._history]
        other._input_specs = list(self._input_specs)
        other._output_shapes = list(self._output_shapes)

    def copy(self, extra: dict | None = None) -> "HorovodModel":
        that = super().copy(extra)
        self._copy_internals_to(that)
        return that


class _HorovodModelWriter(MLWriter):
    def __init__(self, instance: HorovodModel) -> None:
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:
        model = self.instance
        extra = {
            "history": model._history,
            "inputSpecs": [[s.column, s.dtype, list(s.shape)] for s in model._input_specs],
            "outputShapes": [list(shape) for shape in model._output_shapes],
        }
        DefaultParamsWriter.saveMetadata(model, path, self.sparkSession, extraMetadata=extra,
                                         paramMap=model._json_params())
        fs, root = fsspec.core.url_to_fs(path)
        directory = f"{root.rstrip('/')}/{_DATA_DIR}"
        fs.makedirs(directory, exist_ok=True)
        model._save_data(fs, directory)


class _HorovodModelReader(MLReader):
    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> HorovodModel:
        metadata = DefaultParamsReader.loadMetadata(path, self.sparkSession)
        expected = f"{self.cls.__module__}.{self.cls.__name__}"
        if metadata["class"] != expected:
            raise ValueError(f"{path} holds a {metadata['class']}, not a {expected}")
        model = self.cls()
        model._resetUid(metadata["uid"])
        model._set(**metadata["paramMap"])
        model._set_training_outcome(
            metadata.get("history", []),
            [InputSpec(column, dtype, tuple(shape)) for column, dtype, shape in metadata.get("inputSpecs", [])],
            [tuple(shape) for shape in metadata.get("outputShapes", [])])
        fs, root = fsspec.core.url_to_fs(path)
        model._load_data(fs, f"{root.rstrip('/')}/{_DATA_DIR}")
        return model


declare_params(HorovodModel, MODEL_PARAMS)
