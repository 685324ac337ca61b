"""``TorchModel``: the trained torch module as a Spark ML Model (mirrors horovod.spark.torch.TorchModel)."""

from __future__ import annotations

from typing import Any, Callable

import cloudpickle
import numpy as np

from spark_hvd.estimator.model_base import HorovodModel
from spark_hvd.torch.state_bytes import load_state_bytes, state_dict_bytes

_MODULE_FILE = "module.pkl"           # the architecture (cloudpickled torch.nn.Module)
_STATE_FILE = "state_dict.pt"         # the weights, as torch.save(state_dict)


class TorchModel(HorovodModel):
    """``transform(df)`` adds one prediction column per label (``<label>__output`` unless
    ``output_cols`` says otherwise): a double for a scalar output, an array of doubles otherwise.
    ``getModel()`` is the trained ``torch.nn.Module``; ``getHistory()`` the metrics per epoch."""

    def __init__(self) -> None:
        super().__init__()
        self._module: Any = None

    def getModel(self) -> Any:
        return self._module

    def _set_module(self, module: Any) -> None:
        self._module = module.cpu().eval()

    def _predict_factory(self) -> Callable[[], Callable[[list[np.ndarray]], list[np.ndarray]]]:
        return _TorchPredictorFactory(cloudpickle.dumps(self._module), state_dict_bytes(self._module))

    def _save_data(self, fs: Any, directory: str) -> None:
        with fs.open(f"{directory}/{_STATE_FILE}", "wb") as f:
            f.write(state_dict_bytes(self._module))
        with fs.open(f"{directory}/{_MODULE_FILE}", "wb") as f:
            f.write(cloudpickle.dumps(self._module))

    def _load_data(self, fs: Any, directory: str) -> None:
        with fs.open(f"{directory}/{_MODULE_FILE}", "rb") as f:
            module = cloudpickle.loads(f.read())
        with fs.open(f"{directory}/{_STATE_FILE}", "rb") as f:
            self._set_module(load_state_bytes(module, f.read()))

    def _copy_internals_to(self, other: HorovodModel) -> None:
        super()._copy_internals_to(other)
        other._module = self._module


class _TorchPredictorFactory:
    """Shipped to the executors; builds the module once per partition (each a separate Python task)."""

    def __init__(self, module_blob: bytes, state_blob: bytes) -> None:
        self.module_blob, self.state_blob = module_blob, state_blob

    def __call__(self) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        import torch

        from spark_hvd.torch.batch_tensors import as_outputs, column_tensor, model_dtype

        module = load_state_bytes(cloudpickle.loads(self.module_blob), self.state_blob).eval()
        dtype, device = model_dtype(module), torch.device("cpu")

        def predict(features: list[np.ndarray]) -> list[np.ndarray]:
            with torch.inference_mode():
                outputs = as_outputs(module(*[column_tensor(f, dtype, device) for f in features]))
            return [output.detach().to(torch.float64).numpy() for output in outputs]

        return predict
