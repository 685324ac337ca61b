"""``TorchEstimator`` for Lightning: ``fit(df)`` trains a LightningModule with Lightning's own Trainer on num_proc
ranks (mirrors horovod.spark.lightning; driver side).

The shared estimator does the data path (checks, materialisation, lockstep steps), the launch and the
progress; this module adds Lightning's parameters, its checks on the driver and the rank function.
"""

from __future__ import annotations

import warnings
from typing import Any

import cloudpickle
from pyspark import keyword_only

from spark_hvd.errors import InputError
from spark_hvd.estimator.base import FitPlan, HorovodEstimator
from spark_hvd.estimator.batch_transform import InputSpec
from spark_hvd.estimator.param_table import ParamSpec, declare_params, set_defaults, to_positive_int
from spark_hvd.lightning.model import TorchModel
from spark_hvd.lightning.trainer import LightningHooks, LightningObjects, LightningRankSpec
from spark_hvd.recipe.rank_recipe import RANK_MODULES, RecipeRankFn
from spark_hvd.torch.estimator import TORCH_PARAMS

# Horovod's examples compare pytorch_lightning.__version__ with this before they train.
MIN_PL_VERSION = "2.0.0"

_SHARED_WITH_TORCH = ("loss_constructors", "input_shapes", "train_minibatch_fn")
LIGHTNING_PARAMS: list[ParamSpec] = [
    *(spec for spec in TORCH_PARAMS if spec.name in _SHARED_WITH_TORCH),
    ParamSpec("num_gpus", "GPUs per rank: default 1 when the task has one (and use_gpu), else 0", None),
    ParamSpec("logger", "a Lightning logger; default a TensorBoardLogger (CSVLogger without TensorBoard) whose "
              "files are copied to the Store's runs/<run_id>/logs", None),
    ParamSpec("log_every_n_steps", "how often the trainer logs, in steps", 50, to_positive_int),
    ParamSpec("data_module", "a LightningDataModule class, built on every rank with Horovod's keywords "
              "(train_dir, val_dir, cur_shard, shard_count, ...); default this fit's lockstep shard loaders", None),
    ParamSpec("loader_num_epochs", "Horovod's reader epochs (accepted; the loaders here are endless and "
              "take exactly the lockstep steps every epoch)", None),
    ParamSpec("terminate_on_nan", "stop the fit with an error when a training loss is NaN or infinite", False),
    ParamSpec("profiler", "a Lightning profiler or its name ('simple', 'advanced'); reports go with the logs",
              None),
    ParamSpec("trainer_args", "dict of pytorch_lightning.Trainer keywords added to (and overriding) the "
              "estimator's", None),
    ParamSpec("debug_data_loader", "print what each rank's data loaders read", False),
    ParamSpec("train_async_data_loader_queue_size", "Horovod's async loader queue (accepted; the loaders "
              "here read in the training process)", None),
    ParamSpec("val_async_data_loader_queue_size", "Horovod's async loader queue (accepted; as above)", None),
]

# Lightning parameters that change nothing here, and why (warned once each, when set).
_WITHOUT_EFFECT = {
    "loader_num_epochs": "each epoch's loader takes exactly the lockstep number of steps from an endless reader",
    "train_async_data_loader_queue_size": "the loaders read in the training process, with no async queue",
    "val_async_data_loader_queue_size": "the loaders read in the training process, with no async queue",
    "metrics": "a LightningModule records its metrics with self.log in training_step and validation_step",
    "loss_constructors": "a LightningModule computes its loss in training_step",
    "train_minibatch_fn": "a LightningModule's training_step is the training step",
}
# Trainer keywords that would take the ranks away from the estimator's strategy and devices.
_RESERVED_TRAINER_ARGS = ("strategy", "accelerator", "devices", "num_nodes")


class TorchEstimator(HorovodEstimator):
    """Trains a ``pytorch_lightning.LightningModule`` on the rows of a DataFrame with Lightning's ``Trainer`` on
    every rank, as Horovod's ``horovod.spark.lightning.TorchEstimator`` does.

    ``training_step(batch, batch_idx)`` and ``validation_step`` get ``batch`` as a dict of column name ->
    tensor (feature, label and sample weight columns; floating columns in the module's dtype, integer ones
    as they are). ``configure_optimizers``, Lightning callbacks (``callbacks``), loggers (``logger``),
    ``self.log(..., sync_dist=True)``, gradient accumulation and clipping (``trainer_args``) work; the
    gradients are averaged over the ranks by ``collective.torch``. Each epoch is exactly the lockstep
    number of steps on every rank. ``forward(*features)`` is what ``transform`` calls (features reshaped
    to ``input_shapes``).

    Learning rate: the ranks multiply every optimizer's (and scheduler's) rate by num_proc
    (``learning_rate_scaling='linear'``, Horovod's rule); ``'none'`` keeps it. Checkpoints: a resume
    checkpoint after every epoch, and the user's ``ModelCheckpoint`` files, go under the Store's
    ``runs/<run_id>/checkpoints`` (rates unscaled); fitting the same fit again with the same ``run_id``
    resumes (estimator/run_claim.py).
    With a ``ModelCheckpoint`` among the callbacks the model returned holds its best checkpoint's
    weights, as in Horovod. ``getHistory()`` is the metrics the trainer logged last.

    ``elastic=True`` (with ``min_num_proc``, ``max_num_proc``, ``elastic_commit_steps``) fits through
    ``spark_hvd.run_elastic``: a lost executor costs the steps since the last commit (docs/elastic.md).
    """

    params_without_effect = _WITHOUT_EFFECT
    elastic_supported = True

    # torch._dynamo: see TorchEstimator.warm_modules.
    warm_modules = ("torch", "torch._dynamo", "pytorch_lightning", "collective.torch", "spark_hvd.lightning.trainer",
                    *RANK_MODULES)

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
                 train_reader_num_workers: int | None = None, trainer_args: Any = None,
                 val_reader_num_workers: int | None = None, reader_pool_type: str | None = None,
                 label_shapes: Any = None, inmemory_cache_all: bool = False, num_gpus: int | None = None,
                 logger: Any = None, log_every_n_steps: int = 50, data_module: Any = None,
                 loader_num_epochs: int | None = None, terminate_on_nan: bool = False, profiler: Any = None,
                 debug_data_loader: bool = False, train_async_data_loader_queue_size: int | None = None,
                 val_async_data_loader_queue_size: int | None = None, use_gpu: bool = True,
                 mp_start_method: str | None = None, backend_env: Any = None, backward_passes_per_step: int = 1,
                 reader: str = "arrow", learning_rate_scaling: str = "linear", output_cols: Any = None,
                 start_timeout: float = 600.0, elastic: bool = False,
                 min_num_proc: int | None = None, max_num_proc: int | None = None,
                 elastic_commit_steps: int | None = None, checkpoint_every_steps: int | None = None,
                 **unknown: Any) -> None:
        super().__init__()
        _check_lightning_version()
        set_defaults(self, LIGHTNING_PARAMS)
        self._set_init_params(self._input_kwargs)
        self._output_shapes: list[tuple[int, ...]] = []

    @keyword_only
    def setParams(self, **kwargs: Any) -> "TorchEstimator":
        """Sets any of the constructor's keyword parameters."""
        self._set_init_params(self._input_kwargs)
        return self

    # Horovod spells these with a capital GPU.
    def getNumGPUs(self) -> Any:
        return self.getNumGpus()

    def setNumGPUs(self, value: Any) -> "TorchEstimator":
        return self.setNumGpus(value)

    def _scores_implied_by_loss(self) -> str | None:
        from spark_hvd.torch.loss_scores import scores_implied_by

        # The legacy path's loss; a LightningModule's own loss is not visible here.
        return scores_implied_by(self.getLoss())

    def _check_framework_params(self) -> None:
        import pytorch_lightning as pl
        from pytorch_lightning.loggers import Logger
        from pytorch_lightning.utilities.model_helpers import is_overridden

        model = self.getModel()
        if self._legacy():
            self._check_legacy_params()
        elif not isinstance(model, pl.LightningModule):
            raise InputError(f"model must be a pytorch_lightning.LightningModule, or a torch.nn.Module given with an "
                             f"optimizer and a loss; got {type(model).__name__}")
        for name, instead in (("optimizer", "configure_optimizers"), ("loss", "training_step"),
                              ("loss_weights", "training_step")):
            if isinstance(model, pl.LightningModule) and self.getOrDefault(getattr(self, name)) is not None:
                raise InputError(f"{name} cannot be given with a LightningModule: implement "
                                 f"LightningModule.{instead} instead")
        for hook in ("training_step", "configure_optimizers") if isinstance(model, pl.LightningModule) else ():
            if not is_overridden(hook, model):
                raise InputError(f"the LightningModule {type(model).__name__} does not implement {hook}")
        bad = [type(c).__name__ for c in self.getCallbacks() or [] if not isinstance(c, pl.Callback)]
        if bad:
            raise InputError(f"callbacks must be pytorch_lightning callbacks; got {bad}")
        if self.getLogger() is not None and not isinstance(self.getLogger(), Logger):
            raise InputError(f"logger must be a pytorch_lightning logger, got {type(self.getLogger()).__name__}")
        self._check_trainer_args()
        data_module = self.getDataModule()
        if data_module is not None and not (isinstance(data_module, type)
                                            and issubclass(data_module, pl.LightningDataModule)):
            raise InputError("data_module must be a LightningDataModule class (each rank builds it with Horovod's "
                             f"keywords), got {data_module!r}")
        if data_module is not None and (self.getElastic() or self.getCheckpointEverySteps()):
            given = "elastic=True" if self.getElastic() else "checkpoint_every_steps"
            raise InputError(f"data_module cannot be given with {given}: a fit resumed mid-epoch reads only the "
                             "rows the epoch has left, which the estimator's own loaders do; leave data_module "
                             f"unset, or fit without {given}")
        input_shapes = self.getInputShapes()
        if input_shapes is not None and len(input_shapes) != len(self.getFeatureCols()):
            raise InputError(f"input_shapes has {len(input_shapes)} shape(s) for {len(self.getFeatureCols())} "
                             f"feature column(s) {self.getFeatureCols()}")
        self._warn_without_effect()

    def _legacy(self) -> bool:
        """Horovod's legacy path: a plain torch module, which the fit wraps in a LightningModule."""
        import pytorch_lightning as pl
        import torch

        model = self.getModel()
        return isinstance(model, torch.nn.Module) and not isinstance(model, pl.LightningModule)

    def _check_legacy_params(self) -> None:
        import torch

        optimizer = self.getOptimizer()
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InputError(f"a torch.nn.Module (not a LightningModule) trains with an optimizer and a loss, as in "
                             f"Horovod: optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if self.getLoss() is None:
            raise InputError("a torch.nn.Module (not a LightningModule) trains with an optimizer and a loss, as in "
                             "Horovod: give loss")
        self._lightning_module()    # the wrapper checks the optimizer's parameters and the losses

    def _lightning_module(self) -> Any:
        """What the ranks train: the LightningModule given, or the legacy wrapper around the plain module."""
        from spark_hvd.lightning.legacy_module import LegacyModule

        if not self._legacy():
            return self.getModel()
        return LegacyModule(self.getModel(), self.getOptimizer(), self.getLoss(), self.getLossWeights(),
                            self.getFeatureCols(), self.getLabelCols(), self.getSampleWeightCol(),
                            self.getInputShapes())

    def _check_trainer_args(self) -> None:
        trainer_args = self.getTrainerArgs()
        if trainer_args is None:
            return
        if not isinstance(trainer_args, dict):
            raise InputError(f"trainer_args must be a dict of Trainer keywords, got {type(trainer_args).__name__}")
        reserved = [key for key in _RESERVED_TRAINER_ARGS if key in trainer_args]
        if reserved:
            raise InputError(f"trainer_args may not set {reserved}: every rank trains on its own device with "
                             "spark-hvd's collective strategy (use use_gpu / num_gpus to choose the device)")

    def _warn_without_effect(self) -> None:
        num_gpus = self.getNumGpus()
        if num_gpus is not None and num_gpus > 1:
            warnings.warn(f"TorchEstimator (Lightning): num_gpus={num_gpus} trains on one GPU per rank: spark-hvd "
                          "runs one rank per GPU (ask Spark for one GPU per task)", UserWarning, stacklevel=5)

    def _check_sample(self, sample: dict[str, Any]) -> None:
        import torch

        from spark_hvd.data.feed.transformation import apply_transformation
        from spark_hvd.lightning.batch_tensors import forward_inputs
        from spark_hvd.torch.batch_tensors import as_outputs, model_dtype
        from spark_hvd.torch.input_shapes import batch_free

        model = self.getModel()
        batch = apply_transformation(sample, self.getTransformationFn(), self.getTransformationEditFields(),
                                     self.getTransformationRemovedFields())
        columns = [batch[c] for c in self.getFeatureCols()]
        # Training hands the module a dict and never reshapes; only transform's forward takes input_shapes, on
        # whole chunks where every entry is batch-free and else one row at a time (input_shapes.py).
        per_row = not batch_free(self.getInputShapes(), [column.shape[1:] for column in columns])
        if per_row:
            columns = [column[:1] for column in columns]
        features = forward_inputs(columns, self.getFeatureCols(), self.getInputShapes(), model_dtype(model))
        shapes = ", ".join(f"{c}: {tuple(t.shape[1:])}" for c, t in zip(self.getFeatureCols(), features))
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                outputs = as_outputs(model(*features))
        except Exception as e:
            raise InputError(f"the LightningModule's forward cannot take the feature columns (per-row shapes "
                             f"{shapes}); transform calls model(*features): {type(e).__name__}: {e}") from e
        finally:
            model.train(was_training)
        self._output_shapes = [tuple(output.shape if per_row else output.shape[1:]) for output in outputs]
        if self._legacy():
            self._check_legacy_step(batch)

    def _check_legacy_step(self, batch: dict[str, Any]) -> None:
        """The legacy wrapper's training step on the sample: the model, the labels and the loss, as on the ranks."""
        import torch

        from spark_hvd.lightning.batch_tensors import batch_dict
        from spark_hvd.torch.batch_tensors import model_dtype

        wrapper = self._lightning_module()
        was_training = wrapper.model.training
        wrapper.model.eval()
        try:
            with torch.no_grad():
                wrapper.step_loss(batch_dict(batch, model_dtype(wrapper.model)))
        except InputError:
            raise
        except Exception as e:
            raise InputError(f"the model, its outputs and the loss cannot take the columns {self.getFeatureCols()} -> "
                             f"{self.getLabelCols()} (features by keyword, labels as floats, as Horovod's legacy "
                             f"Lightning step gives them): {type(e).__name__}: {e}") from e
        finally:
            wrapper.model.train(was_training)

    def _identity_parts(self) -> dict[str, Any]:
        from spark_hvd.torch.identity import module_structure, optimizer_settings

        model = self.getModel()
        # A LightningModule's optimizer comes from its configure_optimizers, usually set by its hyperparameters.
        optimizer = (optimizer_settings(self.getOptimizer()) if self._legacy()
                     else dict(getattr(model, "hparams", None) or {}))
        return {"model": module_structure(model), "optimizer": optimizer, "input_shapes": self.getInputShapes(),
                "trainer_args": self.getTrainerArgs()}

    def _rank_fn(self, plan: FitPlan) -> RecipeRankFn:
        objects = LightningObjects(
            model=self._lightning_module(), callbacks=list(self.getCallbacks() or []), logger=self.getLogger(),
            profiler=self.getProfiler(), data_module=self.getDataModule(),
            trainer_args=dict(self.getTrainerArgs() or {}), transformation_fn=self.getTransformationFn(),
            compression=self.getGradientCompression(), num_gpus=self.getNumGpus(),
            log_every_n_steps=self.getLogEveryNSteps(), terminate_on_nan=bool(self.getTerminateOnNan()),
            random_seed=self.getRandomSeed(), verbose=self.getVerbose(),
            debug_data_loader=bool(self.getDebugDataLoader()),
            data_module_options={name: self.getOrDefault(getattr(self, name)) for name in (
                "loader_num_epochs", "reader_pool_type", "train_reader_num_workers",
                "train_async_data_loader_queue_size", "val_async_data_loader_queue_size")})
        return RecipeRankFn(LightningHooks, LightningRankSpec(plan=plan, objects=cloudpickle.dumps(objects),
                                                              use_gpu=self.getUseGpu()))

    def _create_model(self, plan: FitPlan, result: Any, output_cols: list[str]) -> TorchModel:
        import copy

        from spark_hvd.torch.state_bytes import load_state_bytes

        module = load_state_bytes(copy.deepcopy(self._lightning_module()), result["state_dict"])
        if self._legacy():
            module = module.model    # Horovod's legacy fit returns the plain module
        columns = plan.data.columns
        model = TorchModel(feature_columns=plan.feature_cols, label_columns=plan.label_cols, output_cols=output_cols,
                           run_id=plan.run_id, model=module, input_shapes=self.getInputShapes())
        model._set_training_outcome(
            result["history"],
            [InputSpec(c, columns[c].dtype, tuple(columns[c].shape), columns[c].kind) for c in plan.feature_cols],
            self._output_specs(plan, output_cols, self._output_shapes), result["epoch_metrics"])
        model._reformations = list(result.get("reformations", []))
        return model


def _check_lightning_version() -> None:
    import pytorch_lightning as pl
    from packaging.version import Version

    if Version(pl.__version__) < Version(MIN_PL_VERSION):
        raise RuntimeError(f"spark_hvd.lightning needs pytorch_lightning >= {MIN_PL_VERSION}, found {pl.__version__} "
                           "(pip install 'spark-hvd[lightning]')")


declare_params(TorchEstimator, LIGHTNING_PARAMS)
