"""``TorchModel`` of a Lightning fit: the trained LightningModule as a Spark ML Model (mirrors
horovod.spark.lightning.TorchModel; driver side, and the predictor that runs in the executors' transform tasks).

It is spark_hvd.torch's TorchModel (batched transform, save and load, Horovod's constructor) with
Lightning's differences: ``getHistory()`` is Horovod's Lightning history, the metrics the trainer logged
last (``{'train_loss': tensor(...), 'val_loss': tensor(...)}``), there is no optimizer (it lives in
``configure_optimizers``), and ``forward`` gets integer columns as integers, as the training steps did.
"""

from __future__ import annotations

from typing import Any, Callable

import cloudpickle
import numpy as np
from pyspark import keyword_only

from spark_hvd.torch.model import TorchModel as _TorchModel
from spark_hvd.torch.state_bytes import load_state_bytes, state_dict_bytes


def _as_floats(history: Any) -> dict[str, float]:
    """Horovod hands tensors around; Spark ML metadata keeps JSON."""
    return {str(name): float(value) for name, value in dict(history or {}).items()}


class TorchModel(_TorchModel):
    """``transform(df)`` adds one prediction column per label (``<label>__output`` unless ``output_cols`` says
    otherwise), typed after the label column; ``getModel()`` is the trained ``LightningModule`` (in eval
    mode, on the CPU); ``getHistory()`` the metrics logged last, name -> 0-d tensor, as Horovod's;
    ``getEpochMetrics()`` spark-hvd's per-epoch record of every logged metric."""

    @keyword_only
    def __init__(self, *, history: Any = None, model: Any = None, feature_columns: Any = None,
                 input_shapes: Any = None, label_columns: Any = None, optimizer: Any = None,
                 run_id: str | None = None, _metadata: Any = None, loss: Any = None, loss_constructors: Any = None,
                 output_cols: Any = None, transform_batch_size: int | None = None) -> None:
        kwargs = dict(self._input_kwargs)
        if kwargs.get("history") is not None:
            kwargs["history"] = _as_floats(kwargs["history"])
        super().__init__(**kwargs)

    def getHistory(self) -> dict[str, Any]:
        import torch

        return {name: torch.tensor(value) for name, value in _as_floats(self._history).items()}

    def _set_training_outcome(self, history: Any, *args: Any, **kwargs: Any) -> None:
        super()._set_training_outcome(_as_floats(history), *args, **kwargs)

    def _predict_factory(self) -> Callable[[], Callable[[list[np.ndarray]], list[np.ndarray]]]:
        return _LightningPredictorFactory(cloudpickle.dumps(self._module), state_dict_bytes(self._module),
                                          self.getFeatureColumns(), self.getInputShapes())


class _LightningPredictorFactory:
    """Shipped to the executors; builds the module once per partition (each a separate Python task)."""

    def __init__(self, module_blob: bytes, state_blob: bytes, feature_cols: list[str], input_shapes: Any) -> None:
        self.module_blob, self.state_blob = module_blob, state_blob
        self.feature_cols, self.input_shapes = feature_cols, input_shapes

    def __call__(self) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        import torch

        from spark_hvd.lightning.batch_tensors import forward_inputs
        from spark_hvd.torch.batch_tensors import as_outputs, model_dtype
        from spark_hvd.torch.input_shapes import predict_in_rows

        module = load_state_bytes(cloudpickle.loads(self.module_blob), self.state_blob).eval()
        dtype = model_dtype(module)

        def predict_batch(features: list[np.ndarray]) -> list[np.ndarray]:
            with torch.inference_mode():
                outputs = as_outputs(module(*forward_inputs(features, self.feature_cols, self.input_shapes, dtype)))
            return [output.detach().to(torch.float64).numpy() for output in outputs]

        def predict(features: list[np.ndarray]) -> list[np.ndarray]:
            return predict_in_rows(predict_batch, features, self.input_shapes)

        return predict
