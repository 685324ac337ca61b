"""``TorchEstimator``: ``fit(df)`` trains a torch model on num_proc ranks (mirrors horovod.spark.torch)."""

from __future__ import annotations

from typing import Any

import cloudpickle

from pyspark import keyword_only

from spark_hvd.errors import InputError
from spark_hvd.estimator.base import FitPlan, HorovodEstimator
from spark_hvd.estimator.batch_transform import InputSpec
from spark_hvd.torch.model import TorchModel
from spark_hvd.torch.trainer import TorchObjects, TorchRankFn, TorchRankSpec


class TorchEstimator(HorovodEstimator):
    """Trains ``model`` with ``optimizer`` and ``loss`` on the rows of a DataFrame.

    Each rank reads an even share of the materialised rows and runs ``batch_size`` rows per step;
    gradients are averaged across ranks every step (every ``backward_passes_per_step`` backward
    passes, which are averaged too). ``model(*features)`` gets one tensor per feature column;
    floating columns take the model's floating dtype, integer columns stay int64 (class indices).
    ``loss(output, label)`` per label column; with ``sample_weight_col`` the loss is taken per row
    (``reduction='none'``) and weighted. ``metrics`` are functions ``metric(output, label)``;
    history keys are ``loss``, the metric names, and ``val_`` versions of both.

    Learning rate: by default it is used as given (``learning_rate_scaling='none'``); with
    ``'linear'`` the ranks multiply it by num_proc, the usual rule when the global batch grows.
    Checkpoints: rank 0 saves model, optimizer and epoch under the Store after every epoch; fitting
    again with the same ``run_id`` resumes after the last completed epoch.
    """

    @keyword_only
    def __init__(self, *, num_proc: int | None = None, model: Any = None, optimizer: Any = None, loss: Any = None,
                 loss_constructors: Any = None, loss_weights: Any = None, metrics: Any = None,
                 feature_cols: Any = None, label_cols: Any = None, sample_weight_col: str | None = None,
                 validation: Any = None, batch_size: int = 32, val_batch_size: int | None = None, epochs: int = 1,
                 train_steps_per_epoch: int | None = None, validation_steps_per_epoch: int | None = None,
                 shuffle: bool = True, shuffle_buffer_size: int = 10_000, random_seed: int = 0, store: Any = None,
                 run_id: str | None = None, backward_passes_per_step: int = 1, gradient_compression: Any = None,
                 transformation_fn: Any = None, inmemory_cache_all: bool = False, reader: str = "arrow",
                 learning_rate_scaling: str = "none", output_cols: Any = None, verbose: int = 1,
                 use_gpu: bool = True, start_timeout: float = 600.0) -> None:
        super().__init__()
        self._set(**self._input_kwargs)
        self._output_shapes: list[tuple[int, ...]] = []

    @keyword_only
    def setParams(self, **kwargs: Any) -> "TorchEstimator":
        """Sets any of the constructor's keyword parameters."""
        return self._set(**self._input_kwargs)

    def _check_framework_params(self) -> None:
        import torch

        if not isinstance(self.getModel(), torch.nn.Module):
            raise InputError(f"model must be a torch.nn.Module, got {type(self.getModel()).__name__}")
        optimizer = self.getOptimizer()
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InputError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        model_params = {id(p) for p in self.getModel().parameters()}
        stray = [p for group in optimizer.param_groups for p in group["params"] if id(p) not in model_params]
        if stray:
            raise InputError(f"the optimizer holds {len(stray)} tensor(s) that are not parameters of the model; "
                             "build it on model.parameters()")
        if self.getLoss() is None and self.getLossConstructors() is None:
            raise InputError("loss (or loss_constructors) is required")

    def _check_sample(self, sample: dict[str, Any]) -> None:
        import torch

        from spark_hvd.torch.batch_tensors import (
            LossComputer,
            as_outputs,
            batch_tensors,
            check_output_label_shapes,
            model_dtype,
            resolve_losses,
        )

        model = self.getModel()
        features, labels, weights = batch_tensors(
            sample, self.getTransformationFn(), self.getFeatureCols(), self.getLabelCols(), self.getSampleWeightCol(),
            model_dtype(model), torch.device("cpu"))
        shapes = ", ".join(f"{c}: {tuple(t.shape[1:])}" for c, t in zip(self.getFeatureCols(), features))
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                outputs = as_outputs(model(*features))
        except Exception as e:
            raise InputError(f"the model cannot take the feature columns (per-row shapes {shapes}): "
                             f"{type(e).__name__}: {e}") from e
        finally:
            model.train(was_training)
        check_output_label_shapes(outputs, labels, self.getLabelCols())
        losses = resolve_losses(self.getLoss(), self.getLossConstructors(), len(labels))
        try:
            LossComputer(losses, self.getLossWeights(), weights is not None)(outputs, labels, weights)
        except InputError:
            raise
        except Exception as e:
            raise InputError(f"the loss cannot compare the model's outputs with label column(s) "
                             f"{self.getLabelCols()}: {type(e).__name__}: {e}") from e
        self._output_shapes = [tuple(output.shape[1:]) for output in outputs]

    def _rank_fn(self, plan: FitPlan) -> TorchRankFn:
        objects = TorchObjects(
            model=self.getModel(), optimizer=self.getOptimizer(), loss=self.getLoss(),
            loss_constructors=self.getLossConstructors(), loss_weights=self.getLossWeights(),
            metrics=list(self.getMetrics() or []), transformation_fn=self.getTransformationFn(),
            compression=self.getGradientCompression())
        return TorchRankFn(TorchRankSpec(plan=plan, objects=cloudpickle.dumps(objects), use_gpu=self.getUseGpu()))

    def _create_model(self, plan: FitPlan, result: Any, output_cols: list[str]) -> TorchModel:
        import copy

        from spark_hvd.torch.state_bytes import load_state_bytes

        module = load_state_bytes(copy.deepcopy(self.getModel()), result["state_dict"])
        columns = plan.data.columns
        model = TorchModel()
        model._set(feature_columns=plan.feature_cols, label_columns=plan.label_cols, output_cols=output_cols,
                   run_id=plan.run_id)
        model._set_module(module)
        model._set_training_outcome(
            result["history"],
            [InputSpec(c, columns[c].dtype, tuple(columns[c].shape)) for c in plan.feature_cols],
            self._output_shapes)
        return model
