"""``TorchModel``: the trained torch module as a Spark ML Model (mirrors horovod.spark.torch.TorchModel; driver
side, and the predictor that runs in the executors' transform tasks)."""

from __future__ import annotations

from typing import Any, Callable

import cloudpickle
import numpy as np
from pyspark import keyword_only

from spark_hvd.estimator.model_base import EpochTimesGetter, HorovodModel
from spark_hvd.torch.state_bytes import from_torch_bytes, load_state_bytes, state_dict_bytes, torch_bytes

_MODULE_FILE = "module.pkl"           # the architecture (cloudpickled torch.nn.Module)
_STATE_FILE = "state_dict.pt"         # the weights, as torch.save(state_dict)
_OPTIMIZER_FILE = "optimizer.pkl"     # the optimizer (cloudpickled with its module, so it stays bound to it)
_EXTRAS_FILE = "extras.pkl"           # loss, loss_constructors, input_shapes


class TorchModel(EpochTimesGetter, HorovodModel):
    """``transform(df)`` adds one prediction column per label (``<label>__output`` unless ``output_cols``
    says otherwise), typed after the label column (see batch_transform). ``getModel()`` is the trained
    ``torch.nn.Module``, ``getOptimizer()`` its optimizer with the final state (learning rate unscaled),
    ``getHistory()`` Horovod's list of ``{'epoch', 'train': {'loss', 'all_metrics'}, 'validation'}``.

    Constructed directly, as Horovod's ``TorchModel(history=..., model=..., feature_columns=...,
    label_columns=..., optimizer=..., run_id=...)``, it wraps a trained module without a fit; the
    input and output shapes are then read off the DataFrame and the model at the first transform.
    """

    # Horovod's TorchModel gives class scores of a scalar label as a DenseVector column.
    scores_as_vectors = True

    @keyword_only
    def __init__(self, *, history: Any = None, model: Any = None, feature_columns: Any = None,
                 input_shapes: Any = None, label_columns: Any = None, optimizer: Any = None,
                 run_id: str | None = None, _metadata: Any = None, loss: Any = None, loss_constructors: Any = None,
                 output_cols: Any = None, transform_batch_size: int | None = None) -> None:
        super().__init__()
        kwargs = dict(self._input_kwargs)
        self._module: Any = None
        self._optimizer: Any = None
        self._extras: dict[str, Any] = {"loss": None, "loss_constructors": None, "input_shapes": None}
        if kwargs.get("model") is not None:
            self._set_module(kwargs.pop("model"))
        kwargs.pop("model", None)
        self._optimizer = kwargs.pop("optimizer", None)
        for name in self._extras:
            self._extras[name] = kwargs.pop(name, None)
        history = kwargs.pop("history", None)
        kwargs.pop("_metadata", None)   # Horovod's internal column metadata; read off the DataFrame here
        self._set(**{name: value for name, value in kwargs.items() if value is not None})
        if history is not None:
            self._history = history
        if self.getLabelColumns() and not self.isSet(self.output_cols):
            self._set(output_cols=[f"{label}__output" for label in self.getLabelColumns()])

    def getModel(self) -> Any:
        return self._module

    def getOptimizer(self) -> Any:
        return self._optimizer

    def getLoss(self) -> Any:
        return self._extras["loss"]

    def getLossConstructors(self) -> Any:
        return self._extras["loss_constructors"]

    def getInputShapes(self) -> Any:
        return self._extras["input_shapes"]

    def _set_module(self, module: Any) -> None:
        self._module = module.cpu().eval()

    def _predict_factory(self) -> Callable[[], Callable[[list[np.ndarray]], list[np.ndarray]]]:
        return _TorchPredictorFactory(cloudpickle.dumps(self._module), state_dict_bytes(self._module),
                                      self.getInputShapes())

    def _save_data(self, fs: Any, directory: str) -> None:
        with fs.open(f"{directory}/{_STATE_FILE}", "wb") as f:
            f.write(state_dict_bytes(self._module))
        with fs.open(f"{directory}/{_MODULE_FILE}", "wb") as f:
            f.write(cloudpickle.dumps(self._module))
        with fs.open(f"{directory}/{_OPTIMIZER_FILE}", "wb") as f:
            f.write(cloudpickle.dumps(None if self._optimizer is None else (
                type(self._optimizer), torch_bytes(self._optimizer.state_dict()), self._optimizer_param_indices())))
        with fs.open(f"{directory}/{_EXTRAS_FILE}", "wb") as f:
            f.write(cloudpickle.dumps(self._extras))

    def _load_data(self, fs: Any, directory: str) -> None:
        with fs.open(f"{directory}/{_MODULE_FILE}", "rb") as f:
            module = cloudpickle.loads(f.read())
        with fs.open(f"{directory}/{_STATE_FILE}", "rb") as f:
            self._set_module(load_state_bytes(module, f.read()))
        if fs.exists(f"{directory}/{_OPTIMIZER_FILE}"):
            with fs.open(f"{directory}/{_OPTIMIZER_FILE}", "rb") as f:
                saved = cloudpickle.loads(f.read())
            if saved is not None:
                optimizer_class, state, param_indices = saved
                state = from_torch_bytes(state)
                params = list(self._module.parameters())
                groups = [{**{k: v for k, v in group.items() if k != "params"}, "params": [params[i] for i in indices]}
                          for group, indices in zip(state["param_groups"], param_indices)]
                self._optimizer = optimizer_class(groups)
                self._optimizer.load_state_dict(state)
        if fs.exists(f"{directory}/{_EXTRAS_FILE}"):
            with fs.open(f"{directory}/{_EXTRAS_FILE}", "rb") as f:
                self._extras = cloudpickle.loads(f.read())

    def _optimizer_param_indices(self) -> list[list[int]]:
        """Each optimizer group's parameters as positions in module.parameters(), to rebind them on load."""
        position = {id(p): i for i, p in enumerate(self._module.parameters())}
        return [[position[id(p)] for p in group["params"]] for group in self._optimizer.param_groups]

    def _copy_internals_to(self, other: HorovodModel) -> None:
        super()._copy_internals_to(other)
        other._module = self._module
        other._optimizer = self._optimizer
        other._extras = dict(self._extras)


class _TorchPredictorFactory:
    """Shipped to the executors; builds the module once per partition (each a separate Python task)."""

    def __init__(self, module_blob: bytes, state_blob: bytes, input_shapes: Any = None) -> None:
        self.module_blob, self.state_blob, self.input_shapes = module_blob, state_blob, input_shapes

    def __call__(self) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        import torch

        from spark_hvd.torch.batch_tensors import as_outputs, feature_tensors, model_dtype
        from spark_hvd.torch.input_shapes import predict_in_rows

        module = load_state_bytes(cloudpickle.loads(self.module_blob), self.state_blob).eval()
        dtype, device = model_dtype(module), torch.device("cpu")

        def predict_batch(features: list[np.ndarray]) -> list[np.ndarray]:
            with torch.inference_mode():
                outputs = as_outputs(module(*feature_tensors(features, self.input_shapes, dtype, device)))
            return [output.detach().to(torch.float64).numpy() for output in outputs]

        def predict(features: list[np.ndarray]) -> list[np.ndarray]:
            return predict_in_rows(predict_batch, features, self.input_shapes)

        return predict
