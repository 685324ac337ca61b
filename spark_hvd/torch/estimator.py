"""``TorchEstimator``: ``fit(df)`` trains a torch model on num_proc ranks (mirrors horovod.spark.torch; driver side)."""

from __future__ import annotations

import warnings
from typing import Any

from pyspark import keyword_only

from spark_hvd.errors import InputError
from spark_hvd.estimator.base import FitPlan, HorovodEstimator
from spark_hvd.estimator.batch_transform import InputSpec
from spark_hvd.estimator.param_table import ParamSpec, declare_params, set_defaults
from spark_hvd.torch.model import TorchModel
from spark_hvd.recipe.rank_recipe import RANK_MODULES, RecipeRankFn
from spark_hvd.torch.trainer import TorchHooks, TorchObjects, TorchRankSpec

TORCH_PARAMS: list[ParamSpec] = [
    ParamSpec("loss_constructors", "functions that build the losses on the ranks (instead of loss)", None),
    ParamSpec("input_shapes", "one shape per feature column, batch dimension included (e.g. [[-1, 1, 28, 28]]): "
              "each feature batch is reshaped to it before the model", None),
    ParamSpec("train_minibatch_fn", "fn(model, optimizer, transform_outputs, loss_fn, inputs, labels, "
              "sample_weights) -> (outputs, loss): replaces the default training step", None),
]


class TorchEstimator(HorovodEstimator):
    """Trains ``model`` with ``optimizer`` and ``loss`` on the rows of a DataFrame, as Horovod's does.

    Each rank reads an even share of the materialised rows and runs ``batch_size`` rows per step;
    gradients are averaged across ranks every step (every ``backward_passes_per_step`` backward
    passes, which are averaged too). Feature and label columns become the model's floating dtype
    (Horovod's ``.float()``); ``input_shapes`` reshape the features, ``label_shapes`` the labels (else a
    label takes its output's shape when the sizes agree); ``model(*features)`` gets one tensor per
    feature column. ``loss(output, label)`` per label column, weighted by ``loss_weights`` (default
    1 / labels); with ``sample_weight_col`` each row's loss is multiplied by its weight and the batch
    averaged. ``metrics`` are Horovod's metric groups (a function, or a list of one function or one
    per output), averaged over every rank's rows.

    Learning rate: the ranks multiply it by num_proc (``learning_rate_scaling='linear'``, Horovod's
    rule); ``'none'`` keeps it. ``getHistory()`` is Horovod's list of ``{'epoch', 'train',
    'validation'}``. Checkpoints: rank 0 saves model and optimizer (learning rate unscaled) under the
    Store after every epoch; fitting the same fit again with the same ``run_id`` resumes after the last
    epoch (another fit trains under a run of its own: estimator/run_claim.py).
    ``elastic=True`` (with ``min_num_proc``, ``max_num_proc``, ``elastic_commit_steps``) fits through
    ``spark_hvd.run_elastic``: a lost executor costs the steps since the last commit (docs/elastic.md).
    Every estimator also takes Spark ML's classifier params as keywords (``classification``,
    ``predictionCol``, ``probabilityCol``, ``rawPredictionCol``: docs/tuning.md).
    """

    # torch._dynamo: torch.optim imports it at an optimizer's first step (about as long as importing torch
    # itself), which would otherwise fall inside the fit's first broadcast (broadcast_optimizer_state).
    warm_modules = ("torch", "torch._dynamo", "collective.torch", "spark_hvd.torch.trainer", *RANK_MODULES)
    elastic_supported = True

    @keyword_only
    def __init__(self, *, num_proc: int | None = None, model: Any = None, backend: Any = None, store: Any = None,
                 optimizer: Any = None, loss: Any = None, loss_constructors: Any = None, metrics: Any = None,
                 loss_weights: Any = None, sample_weight_col: str | None = None, gradient_compression: Any = None,
                 feature_cols: Any = None, input_shapes: Any = None, validation: Any = None, label_cols: Any = None,
                 callbacks: Any = None, batch_size: int | None = None, val_batch_size: int | None = None,
                 epochs: int | None = None, verbose: int = 1, random_seed: int | None = None,
                 shuffle_buffer_size: int | None = None, shuffle: bool = True,
                 partitions_per_process: int | None = None, run_id: str | None = None,
                 train_minibatch_fn: Any = None, train_steps_per_epoch: int | None = None,
                 validation_steps_per_epoch: int | None = None, transformation_fn: Any = None,
                 transformation_edit_fields: Any = None, transformation_removed_fields: Any = None,
                 train_reader_num_workers: int | None = None, val_reader_num_workers: int | None = None,
                 reader_pool_type: str | None = None, label_shapes: Any = None, inmemory_cache_all: bool = False,
                 use_gpu: bool = True, mp_start_method: str | None = None, backend_env: Any = None,
                 backward_passes_per_step: int = 1, reader: str = "arrow", learning_rate_scaling: str = "linear",
                 output_cols: Any = None, start_timeout: float = 600.0, elastic: bool = False,
                 min_num_proc: int | None = None, max_num_proc: int | None = None,
                 elastic_commit_steps: int | None = None, checkpoint_every_steps: int | None = None,
                 **unknown: Any) -> None:
        super().__init__()
        set_defaults(self, TORCH_PARAMS)
        self._set_init_params(self._input_kwargs)
        self._output_shapes: list[tuple[int, ...]] = []

    @keyword_only
    def setParams(self, **kwargs: Any) -> "TorchEstimator":
        """Sets any of the constructor's keyword parameters."""
        self._set_init_params(self._input_kwargs)
        return self

    def _scores_implied_by_loss(self) -> str | None:
        from spark_hvd.torch.loss_scores import scores_implied_by

        return scores_implied_by(self.getLoss()) or scores_implied_by(self.getLossConstructors())

    def _check_framework_params(self) -> None:
        import torch

        from spark_hvd.torch.epoch_loop import metric_groups

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
        input_shapes = self.getInputShapes()
        if input_shapes is not None and len(input_shapes) != len(self.getFeatureCols()):
            raise InputError(f"input_shapes has {len(input_shapes)} shape(s) for {len(self.getFeatureCols())} "
                             f"feature column(s) {self.getFeatureCols()}")
        try:
            metric_groups(self.getMetrics(), self.getLabelCols())
        except ValueError as e:
            raise InputError(f"metrics: {e}") from e
        if self.getCallbacks():
            warnings.warn("TorchEstimator runs no callbacks (as Horovod's TorchEstimator); use train_minibatch_fn "
                          "to change the step, or spark_hvd.lightning.TorchEstimator for Lightning callbacks",
                          UserWarning, stacklevel=4)

    def _check_sample(self, sample: dict[str, Any]) -> None:
        """The sample goes through the model and the loss as training's batches will (see input_shapes.py):
        two rows stand for any batch when every input_shapes entry is batch-free; otherwise the rows are
        repeated to exactly each batch size training feeds, and transform's per-row output is read off one row."""
        import torch

        from spark_hvd.torch.batch_tensors import batch_tensors, model_dtype
        from spark_hvd.torch.input_shapes import batch_free, check_batches, tiled

        input_shapes = self.getInputShapes()
        columns, _, _ = batch_tensors(sample, self._transformation(), self.getFeatureCols(), self.getLabelCols(),
                                      self.getSampleWeightCol(), model_dtype(self.getModel()), torch.device("cpu"))
        row_shapes = [tuple(t.shape[1:]) for t in columns]
        sizes = {"batch_size": self.getBatchSize()}
        if self.getValidation():
            sizes["val_batch_size"] = self.getValBatchSize() or self.getBatchSize()
        check_batches(input_shapes, row_shapes, self.getFeatureCols(), sizes)
        if batch_free(input_shapes, row_shapes):
            self._output_shapes = [shape[1:] for shape in self._check_batch(sample)]
            return
        for rows in sorted(set(sizes.values())):
            outputs = self._check_batch(tiled(sample, rows))
        self._output_shapes = self._row_output_shapes(tiled(sample, 1)) or [shape[1:] for shape in outputs]

    def _row_output_shapes(self, row: dict[str, Any]) -> list[tuple[int, ...]] | None:
        """The model's whole output for one row, as transform predicts row by row; None where one row does not
        fit input_shapes (transform then names the entry, as Horovod's fails there)."""
        import torch

        from spark_hvd.torch.batch_tensors import as_outputs, batch_tensors, model_dtype

        model = self.getModel()
        try:
            features, _, _ = batch_tensors(row, self._transformation(), self.getFeatureCols(), self.getLabelCols(),
                                           self.getSampleWeightCol(), model_dtype(model), torch.device("cpu"),
                                           self.getInputShapes())
        except InputError:
            return None
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return [tuple(output.shape) for output in as_outputs(model(*features))]
        except Exception:   # noqa: BLE001 - training takes its batches; only transform's single rows fail here
            return None
        finally:
            model.train(was_training)

    def _check_batch(self, sample: dict[str, Any]) -> list[tuple[int, ...]]:
        """One batch through the model and the loss, as a training step takes it; the outputs' shapes."""
        import torch

        from spark_hvd.torch.batch_tensors import (
            LossComputer,
            align_labels,
            as_outputs,
            batch_tensors,
            check_output_label_shapes,
            model_dtype,
            resolve_losses,
        )

        model = self.getModel()
        transformation = self._transformation()
        features, labels, weights = batch_tensors(
            sample, transformation, self.getFeatureCols(), self.getLabelCols(), self.getSampleWeightCol(),
            model_dtype(model), torch.device("cpu"), self.getInputShapes())
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
        try:
            labels = align_labels(outputs, labels, self.getLabelShapes())
        except RuntimeError as e:
            raise InputError(f"label_shapes {self.getLabelShapes()} do not fit the label columns "
                             f"{self.getLabelCols()}: {e}") from e
        check_output_label_shapes(outputs, labels, self.getLabelCols())
        losses = resolve_losses(self.getLoss(), self.getLossConstructors(), len(labels))
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                LossComputer(losses, self.getLossWeights(), weights is not None)(outputs, labels, weights)
        except InputError:
            raise
        except Exception as e:
            raise InputError(f"the loss cannot compare the model's outputs with label column(s) "
                             f"{self.getLabelCols()} (labels arrive as floats, as in Horovod; a loss that needs "
                             f"class indices must cast them, e.g. target.long()): {type(e).__name__}: {e}") from e
        broadcast = [w for w in caught if "target size" in str(w.message) and "input size" in str(w.message)]
        if broadcast:
            raise InputError(f"the loss would broadcast label column(s) {self.getLabelCols()} (per-row shapes "
                             f"{[tuple(t.shape[1:]) for t in labels]}) against the model's outputs (per-row shapes "
                             f"{[tuple(o.shape[1:]) for o in outputs]}): {broadcast[0].message}")
        return [tuple(output.shape) for output in outputs]

    def _transformation(self) -> tuple[Any, Any, Any] | None:
        fn = self.getTransformationFn()
        return None if fn is None else (fn, self.getTransformationEditFields(), self.getTransformationRemovedFields())

    def _identity_parts(self) -> dict[str, Any]:
        from spark_hvd.torch.identity import module_structure, optimizer_settings

        return {"model": module_structure(self.getModel()), "optimizer": optimizer_settings(self.getOptimizer()),
                "input_shapes": self.getInputShapes(), "loss_constructors": self.getLossConstructors()}

    def _rank_fn(self, plan: FitPlan) -> RecipeRankFn:
        objects = TorchObjects(
            model=self.getModel(), optimizer=self.getOptimizer(), loss=self.getLoss(),
            loss_constructors=self.getLossConstructors(), loss_weights=self.getLossWeights(),
            metrics=list(self.getMetrics() or []), transformation_fn=self.getTransformationFn(),
            compression=self.getGradientCompression(), input_shapes=self.getInputShapes(),
            train_minibatch_fn=self.getTrainMinibatchFn())
        return RecipeRankFn(TorchHooks, TorchRankSpec(plan=plan, objects=objects, use_gpu=self.getUseGpu()))

    def _create_model(self, plan: FitPlan, result: Any, output_cols: list[str]) -> TorchModel:
        import copy

        from spark_hvd.torch.state_bytes import from_torch_bytes, load_state_bytes

        module = load_state_bytes(copy.deepcopy(self.getModel()), result["state_dict"])
        optimizer = _optimizer_for(module, self.getModel(), self.getOptimizer(),
                                   from_torch_bytes(result["optimizer_state"]))
        columns = plan.data.columns
        model = TorchModel(feature_columns=plan.feature_cols, label_columns=plan.label_cols, output_cols=output_cols,
                           run_id=plan.run_id, model=module, optimizer=optimizer, loss=self.getLoss(),
                           loss_constructors=self.getLossConstructors(), input_shapes=self.getInputShapes())
        model._set_training_outcome(
            result["history"],
            [InputSpec(c, columns[c].dtype, tuple(columns[c].shape), columns[c].kind) for c in plan.feature_cols],
            self._output_specs(plan, output_cols, self._output_shapes), result["epoch_metrics"])
        model._reformations = list(result.get("reformations", []))
        return model


def _optimizer_for(module: Any, template_model: Any, template: Any, state: dict[str, Any]) -> Any:
    """An optimizer of the user's class on the trained module (its groups mapped parameter by parameter),
    holding the run's final state with the unscaled learning rate, as Horovod's TorchModel has."""
    index = {id(p): i for i, p in enumerate(template_model.parameters())}
    params = list(module.parameters())
    groups = [{**{k: v for k, v in group.items() if k != "params"},
               "params": [params[index[id(p)]] for p in group["params"]]} for group in template.param_groups]
    optimizer = type(template)(groups)
    optimizer.load_state_dict(state)
    return optimizer


declare_params(TorchEstimator, TORCH_PARAMS)
