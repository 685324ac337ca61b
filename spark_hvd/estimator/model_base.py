"""``HorovodModel``: the framework-independent Spark ML Model a fit returns.

``transform`` is batched (see batch_transform.py). Persistence follows Spark ML's layout, so a
model saves and loads alone or as a stage of a PipelineModel:

    <path>/metadata/   Spark's JSON metadata (class, uid, params, history, input and output specs)
    <path>/data/       the framework's own files (TorchModel: the module and its state dict), and
                       transformation.pkl: the fit's transformation_fn and inference_transformation_fn
                       (cloudpickle, as the model itself is kept)

transform() applies a transformation to the rows before predicting by this rule (``_inference_transformation``):
``inference_transformation_fn`` when it is a function; nothing when it is False; the fit's
``transformation_fn`` when it is True, or by default (None) where a feature column was encoded at fit (binary,
string, image struct, arrays of varying lengths). So a model whose feature columns are all numeric predicts
as Horovod's does (its transform never applies transformation_fn), and one trained on images or text decodes
them at transform as at fit.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import fsspec
import numpy as np
from pyspark.ml import Model
from pyspark.ml.util import DefaultParamsWriter, MLReadable, MLReader, MLWritable, MLWriter

from spark_hvd.data.columns import ENCODED_KINDS
from spark_hvd.errors import InputError
from spark_hvd.estimator.batch_transform import InferenceTransformation, InputSpec, OutputSpec, batched_transform
from spark_hvd.estimator.classifier_outputs import CLASSIFIER_PARAMS, classifier_outputs
from spark_hvd.estimator.param_table import declare_params, set_defaults
from spark_hvd.estimator.params import MODEL_CODE_PARAMS, MODEL_PARAMS

_DATA_DIR = "data"
_TRANSFORMATION_FILE = "transformation.pkl"   # cloudpickle: {"fit": (fn, edit, removed) or None, "inference": ...}


class HorovodModel(Model, MLWritable, MLReadable):
    """Subclasses provide ``_predict_factory()``, ``_save_data(fs, dir)`` and ``_load_data(fs, dir)``."""

    # A scalar label's prediction with several values per row (class scores) is a DenseVector column
    # (Horovod's torch models), or an array of doubles.
    scores_as_vectors = False

    def __init__(self) -> None:
        super().__init__()
        set_defaults(self, [*MODEL_PARAMS, *CLASSIFIER_PARAMS])
        self._history: Any = []                          # the framework's Horovod-shaped history
        self._epoch_metrics: list[dict[str, float]] = []  # flat: [{"epoch": 0, "loss": ..., "val_loss": ...}]
        self._input_specs: list[InputSpec] = []
        self._output_specs: list[OutputSpec] = []
        self._fit_timings: dict[str, float] = {}
        # An elastic fit's re-formations, kept beside the history so that its format stays Horovod's.
        self._reformations: list[dict[str, int]] = []
        # The estimator's (transformation_fn, transformation_edit_fields, transformation_removed_fields), or None.
        self._fit_transformation: tuple[Any, Any, Any] | None = None

    def getTransformationFn(self) -> Any:
        """Driver: the estimator's ``transformation_fn`` this model was fitted with (None without one)."""
        return None if self._fit_transformation is None else self._fit_transformation[0]

    def _set_fit_transformation(self, fn: Any, edit_fields: Any = None, removed_fields: Any = None) -> None:
        self._fit_transformation = None if fn is None else (fn, edit_fields, removed_fields)

    def _inference_transformation(self) -> InferenceTransformation | None:
        """Driver: what transform() applies to the rows (see the module's docstring for the rule)."""
        chosen = self.getOrDefault(self.inference_transformation_fn)
        if chosen is False:
            return None
        if chosen is not None and chosen is not True:
            if not callable(chosen):
                raise InputError(f"inference_transformation_fn must be None, True, False or a function of a row "
                                 f"(or a BatchTransformation), got {type(chosen).__name__}")
            return InferenceTransformation(chosen)
        if self._fit_transformation is None:
            if chosen is True:
                raise InputError("inference_transformation_fn=True applies the estimator's transformation_fn, but "
                                 "this model was not fitted with one")
            return None
        encoded = any(spec.kind in ENCODED_KINDS for spec in self._input_specs)
        if chosen is True or encoded:
            return InferenceTransformation(*self._fit_transformation)
        return None

    def getFitTimings(self) -> dict[str, float]:
        """Seconds per phase of the fit that made this model (materialize, launch, train, return,
        total); empty for a loaded model."""
        return dict(self._fit_timings)

    def getHistory(self) -> Any:
        """The training history in the shape Horovod's model of this framework gives (see the subclass)."""
        return copy.deepcopy(self._history)

    def getEpochMetrics(self) -> list[dict[str, float]]:
        """spark-hvd's flat view of the history, the same for every framework:
        ``[{"epoch": 0, "loss": ..., "<metric>": ..., "val_loss": ..., "val_<metric>": ...}, ...]``."""
        return [dict(entry) for entry in self._epoch_metrics]

    def getReformations(self) -> list[dict[str, int]]:
        """Where an ``elastic=True`` fit re-formed, in order: ``{"epoch", "step", "size", "previous_size"}``
        each (training resumed at that epoch and step on ``size`` ranks); empty for a static fit."""
        return [dict(entry) for entry in self._reformations]

    def _set_training_outcome(self, history: Any, input_specs: list[InputSpec], output_specs: list[OutputSpec],
                              epoch_metrics: list[dict[str, float]] | None = None) -> None:
        self._history = copy.deepcopy(history)
        self._epoch_metrics = [dict(entry) for entry in (epoch_metrics or [])]
        self._input_specs = list(input_specs)
        self._output_specs = list(output_specs)

    # --- transform ------------------------------------------------------------------------
    def _predict_factory(self) -> Callable[[], Callable[[list[np.ndarray]], list[np.ndarray]]]:
        raise NotImplementedError

    def _transform(self, dataset: Any) -> Any:
        if not self._input_specs:
            from spark_hvd.estimator.spec_inference import infer_specs

            self._input_specs, self._output_specs = infer_specs(
                dataset, self.getFeatureColumns(), self.getLabelColumns(), self.getOutputCols(),
                self._predict_factory())
        # The names may have been changed with setOutputCols since the fit.
        outputs = [OutputSpec(column, spec.shape, spec.label_kind, spec.label_dtype, self.scores_as_vectors)
                   for column, spec in zip(self.getOutputCols(), self._output_specs)]
        taken = [*dataset.columns, *(spec.column for spec in outputs)]
        classifier = classifier_outputs(self, self.getLabelColumns(), [spec.shape for spec in outputs], taken)
        return batched_transform(dataset, self._input_specs, outputs, self._predict_factory(),
                                 self.getTransformBatchSize(), self._inference_transformation(), classifier)

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
        return {spec.name: self.getOrDefault(getattr(self, spec.name)) for spec in [*MODEL_PARAMS, *CLASSIFIER_PARAMS]
                if spec.name not in MODEL_CODE_PARAMS}

    def _save_transformation(self, fs: Any, directory: str) -> None:
        import cloudpickle

        kept = {"fit": self._fit_transformation, "inference": self.getOrDefault(self.inference_transformation_fn)}
        if kept["fit"] is None and kept["inference"] is None:
            return
        with fs.open(f"{directory}/{_TRANSFORMATION_FILE}", "wb") as f:
            f.write(cloudpickle.dumps(kept))

    def _load_transformation(self, fs: Any, directory: str) -> None:
        import cloudpickle

        if not fs.exists(f"{directory}/{_TRANSFORMATION_FILE}"):
            return
        with fs.open(f"{directory}/{_TRANSFORMATION_FILE}", "rb") as f:
            kept = cloudpickle.loads(f.read())
        self._fit_transformation = kept.get("fit")
        if kept.get("inference") is not None:
            self._set(inference_transformation_fn=kept["inference"])

    def _copy_internals_to(self, other: "HorovodModel") -> None:
        other._history = copy.deepcopy(self._history)
        other._epoch_metrics = [dict(entry) for entry in self._epoch_metrics]
        other._reformations = [dict(entry) for entry in self._reformations]
        other._input_specs = list(self._input_specs)
        other._output_specs = list(self._output_specs)
        other._fit_transformation = self._fit_transformation

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
            "epochMetrics": model._epoch_metrics,
            "reformations": model._reformations,
            "inputSpecs": [[s.column, s.dtype, list(s.shape), s.kind] for s in model._input_specs],
            "outputSpecs": [[list(s.shape), s.label_kind, s.label_dtype] for s in model._output_specs],
        }
        DefaultParamsWriter.saveMetadata(model, path, self.sparkSession, extraMetadata=extra,
                                         paramMap=model._json_params())
        fs, root = fsspec.core.url_to_fs(path)
        directory = f"{root.rstrip('/')}/{_DATA_DIR}"
        fs.makedirs(directory, exist_ok=True)
        model._save_data(fs, directory)
        model._save_transformation(fs, directory)


class _HorovodModelReader(MLReader):
    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> HorovodModel:
        from spark_hvd.estimator.estimator_persistence import load_stage_metadata

        metadata = load_stage_metadata(self.cls, path, self.sparkSession)
        model = self.cls()
        model._resetUid(metadata["uid"])
        model._set(**metadata["paramMap"])
        model._set_training_outcome(
            metadata.get("history", []),
            [InputSpec(column, dtype, tuple(shape), *kind) for column, dtype, shape, *kind
             in metadata.get("inputSpecs", [])],
            [OutputSpec(column, tuple(shape), kind, dtype) for column, (shape, kind, dtype)
             in zip(model.getOutputCols(), metadata.get("outputSpecs", []))],
            metadata.get("epochMetrics", []))
        model._reformations = list(metadata.get("reformations", []))
        fs, root = fsspec.core.url_to_fs(path)
        model._load_data(fs, f"{root.rstrip('/')}/{_DATA_DIR}")
        model._load_transformation(fs, f"{root.rstrip('/')}/{_DATA_DIR}")
        return model


declare_params(HorovodModel, [*MODEL_PARAMS, *CLASSIFIER_PARAMS])


class EpochTimesGetter:
    """``model.getEpochTimes()``, mixed into the fitted models (before HorovodModel); the fit sets
    ``_epoch_times``. Kept apart from ``getHistory()`` (Horovod's shape) and ``getEpochMetrics()`` (which a
    seeded fit reproduces exactly, while times never repeat); like ``getFitTimings()``, it describes the fit:
    a loaded model has none."""

    _epoch_times: list[dict[str, Any]]

    def getEpochTimes(self) -> list[dict[str, Any]]:
        """Driver: per epoch the fit trained, ``{"epoch", "input_s", "compute_s", "communication_s",
        "slowest_rank", "ranks", "padded_rows", "left_out_rows"}``: the seconds each rank spent waiting for
        input, computing (forward, backward, the update) and waiting for gradient communication that compute
        did not hide, averaged over the ranks, the rank whose input and compute took longest
        (docs/estimators.md says what to do when one share dominates), and the rows the epoch trained a second
        time (lockstep padding) or left out (docs/data.md). Empty for a loaded model."""
        return [dict(entry) for entry in getattr(self, "_epoch_times", [])]

    def _copy_internals_to(self, other: Any) -> None:
        super()._copy_internals_to(other)  # type: ignore[misc]
        other._epoch_times = self.getEpochTimes()
