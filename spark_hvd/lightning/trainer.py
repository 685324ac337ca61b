"""What every rank of a Lightning fit runs (rank child): Lightning's own ``Trainer.fit`` on our strategy and data.

init collective.torch -> seed (Horovod: the same ``random_seed`` on every rank) -> the device, agreed by all
ranks -> a local run directory mirrored to the Store -> rank 0 looks for the run's resume checkpoint ->
``Trainer(strategy=CollectiveStrategy, callbacks=[user's..., FitRecorder], logger, ...)`` with the user's
``trainer_args`` on top -> ``trainer.fit(module, datamodule, ckpt_path=<resume point or None>)`` -> rank 0
returns the weights (those of the best checkpoint when the user gave a ModelCheckpoint, as Horovod does),
the final logged metrics (Horovod's history) and the per-epoch records. An elastic plan (``elastic=True``)
runs ``Trainer.fit`` under ``hvd.elastic.run`` instead, one Trainer per formation (elastic_training.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from spark_hvd.estimator.base import FitPlan

RESUME_FILE = "resume.ckpt"


@dataclass(frozen=True)
class LightningRankSpec:
    plan: FitPlan
    objects: bytes            # cloudpickle(LightningObjects): the user's module, callbacks and logger
    use_gpu: bool


@dataclass
class LightningObjects:
    model: Any
    callbacks: list[Any] = field(default_factory=list)
    logger: Any = None
    profiler: Any = None
    data_module: Any = None               # a LightningDataModule class, built with Horovod's keywords
    trainer_args: dict[str, Any] = field(default_factory=dict)
    transformation_fn: Any = None
    compression: Any = None
    num_gpus: int | None = None
    log_every_n_steps: int = 50
    terminate_on_nan: bool = False
    random_seed: int | None = None
    verbose: int = 1
    debug_data_loader: bool = False
    data_module_options: dict[str, Any] = field(default_factory=dict)   # Horovod's reader keywords


class LightningRankFn:
    """Picklable callable handed to spark_hvd.run."""

    def __init__(self, spec: LightningRankSpec) -> None:
        self.spec = spec

    def __call__(self) -> dict[str, Any] | None:
        return train_rank(self.spec)


def train_rank(spec: LightningRankSpec) -> dict[str, Any] | None:
    import pytorch_lightning as pl
    import torch

    import collective.torch as hvd
    from spark_hvd.recipe.rank_progress import RankProgress
    from spark_hvd.lightning.checkpoint_io import StoreCheckpointIO
    from spark_hvd.lightning.legacy_hooks import adapt_module
    from spark_hvd.lightning.rank_callbacks import scalar_metrics
    from spark_hvd.lightning.run_directory import RunDirectory
    from spark_hvd.lightning.strategy import set_rank_zero
    from spark_hvd.torch.state_bytes import torch_bytes

    plan = spec.plan
    _quiet_known_warnings()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    set_rank_zero(rank)
    # Ranks that share a host share its cores; without this each would start one thread per core.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, hvd.local_size())))
    objects: LightningObjects = cloudpickle.loads(spec.objects)
    if objects.random_seed is not None:
        pl.seed_everything(objects.random_seed, verbose=False)
    device = _agreed_device(spec.use_gpu, objects.num_gpus, hvd)
    store = plan.data.store
    local = RunDirectory(plan.run_id, rank).create()
    checkpoint_io = StoreCheckpointIO(store, store.get_checkpoint_path(plan.run_id), local.checkpoints)
    checkpointing = bool(objects.trainer_args.get("enable_checkpointing", True))
    resume_path = os.path.join(local.checkpoints, RESUME_FILE)
    resume = _resume_point(checkpoint_io, resume_path, hvd) if checkpointing else None
    linear = plan.learning_rate_scaling == "linear"

    def sync_logs() -> None:
        if hvd.rank() == 0:
            local.sync_logs(store, plan.run_id)

    def fit(rank: int, size: int, ckpt_path: str | None, resume_at: tuple[int, int] | None = None,
            commits: Any = None) -> tuple[Any, Any, list[Any]]:
        lr_factor = size if linear else 1
        after_epoch = sync_logs if commits is None else lambda: (sync_logs(), commits.commit_epoch_end())
        recorder = _recorder(checkpointing, RankProgress(rank), resume_path, lr_factor, after_epoch)
        trainer, user_callbacks = _trainer(plan, objects, device, lr_factor, checkpoint_io, local, recorder, resume,
                                           [commits] if commits is not None else [])
        data = _data_module(plan, objects, rank, size, resume_at)
        trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
        return trainer, recorder, user_callbacks

    module = objects.model
    restore_module = adapt_module(module)
    start_ckpt = resume_path if resume else None
    extra: dict[str, Any] = {}
    # Everything worth keeping is in the Store by the end (checkpoints as written, logs by sync_logs).
    try:
        try:
            if plan.elastic is None:
                trainer, recorder, user_callbacks = fit(rank, size, start_ckpt)
            else:
                from spark_hvd.lightning.elastic_training import fit_elastic

                outcome = fit_elastic(hvd, module, plan.elastic, resume["epochs_done"] if resume else 0, linear,
                                      local.root, start_ckpt,
                                      lambda f: fit(f.rank, f.size, f.ckpt_path, f.resume_at, f.commits))
                trainer, recorder, user_callbacks = outcome.trainer, outcome.recorder, outcome.user_callbacks
                extra["reformations"] = outcome.reformations
        except BaseException:
            _best_effort(sync_logs)
            raise
        finally:
            restore_module()
        sync_logs()
        if hvd.rank() != 0:
            return None
        best = _best_checkpoint(user_callbacks)
        state = checkpoint_io.load_checkpoint(best)["state_dict"] if best else module.state_dict()
        return {"state_dict": torch_bytes({name: value.detach().cpu() for name, value in state.items()}),
                # Horovod's history is trainer.logged_metrics; a refit of a finished run logs nothing new.
                "history": scalar_metrics(trainer.logged_metrics) or dict(recorder.logged),
                "epoch_metrics": list(recorder.epoch_metrics), **extra}
    finally:
        local.remove()


def _quiet_known_warnings() -> None:
    import warnings

    # Our loaders have no workers (the warning is about num_workers > 1), and Lightning 2.6 calls a pytree
    # API that torch 2.13 deprecated; neither says anything the user can act on, on every rank of every fit.
    warnings.filterwarnings("ignore", message=r".*IterableDataset.*has `__len__` defined")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    # An elastic fit resumes mid-epoch on purpose: its data module skips the batches the commit trained.
    warnings.filterwarnings("ignore", message=r".*resuming from a checkpoint that ended before the epoch ended")


def _agreed_device(use_gpu: bool, num_gpus: int | None, hvd: Any) -> Any:
    """This rank's GPU when asked for and present, else the CPU; every rank must come out the same,
    since a gradient cannot be averaged across a GPU rank and a CPU rank."""
    import torch

    cuda = bool(use_gpu and num_gpus != 0 and torch.cuda.is_available())
    everyone = hvd.allgather_object(cuda, name="shvd.lightning.device")
    if len(set(everyone)) != 1:
        gpus = [r for r, has in enumerate(everyone) if has]
        raise RuntimeError(f"ranks disagree on the device: ranks {gpus} would train on a GPU, the others on the "
                           "CPU; give every task a GPU, or set use_gpu=False")
    return torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")


def _resume_point(checkpoint_io: Any, resume_path: str, hvd: Any) -> dict[str, Any] | None:
    """Rank 0 reads the run's resume checkpoint, if there is one, and tells every rank what it holds."""
    from spark_hvd.lightning.rank_callbacks import RECORDER_STATE_KEY

    point = None
    if hvd.rank() == 0:
        target = checkpoint_io.store_path(resume_path)
        if checkpoint_io.store.exists(target):
            checkpoint = checkpoint_io.load_checkpoint(resume_path)
            state = checkpoint.get("callbacks", {}).get(RECORDER_STATE_KEY, {})
            point = {"epochs_done": len(state.get("epoch_metrics", [])), "stopped": bool(state.get("stopped"))}
    return hvd.broadcast_object(point, root_rank=0, name="shvd.lightning.resume")


def _recorder(checkpointing: bool, progress: Any, resume_path: str, lr_factor: float, after_epoch: Any) -> Any:
    from spark_hvd.lightning.rank_callbacks import FitRecorder, PlainFitRecorder

    if checkpointing:
        return FitRecorder(progress, resume_path, lr_factor, after_epoch)
    return PlainFitRecorder(progress, None, lr_factor, after_epoch)


def _trainer(plan: FitPlan, objects: LightningObjects, device: Any, lr_factor: float, checkpoint_io: Any,
             local: Any, recorder: Any, resume: dict[str, Any] | None, ours: list[Any]) -> tuple[Any, list[Any]]:
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint
    from pytorch_lightning.profilers import PassThroughProfiler

    from spark_hvd.lightning.legacy_hooks import adapt_callback, run_init_hooks
    from spark_hvd.lightning.rank_callbacks import TerminateOnNan
    from spark_hvd.lightning.strategy import CollectiveStrategy

    user_callbacks = [adapt_callback(callback) for callback in objects.callbacks]
    for callback in user_callbacks:
        if isinstance(callback, ModelCheckpoint):
            # As Horovod: checkpoints go to the run's directory, which the Store mirrors.
            callback.dirpath = local.checkpoints
    callbacks = [*user_callbacks, *([TerminateOnNan()] if objects.terminate_on_nan else []), *ours, recorder]
    # A run that stopped early is complete: its epochs are all Lightning may run, so a refit trains no more.
    max_epochs = resume["epochs_done"] if resume and resume["stopped"] else plan.epochs
    cuda = device.type == "cuda"
    kwargs: dict[str, Any] = dict(
        strategy=CollectiveStrategy(device, lr_factor, objects.compression, checkpoint_io),
        accelerator="gpu" if cuda else "cpu", devices=[device.index] if cuda else 1,
        max_epochs=max_epochs, callbacks=callbacks,
        logger=objects.logger if objects.logger is not None else _default_logger(local.logs),
        log_every_n_steps=objects.log_every_n_steps, num_sanity_val_steps=0,
        # The driver shows rank 0's progress; a bar here would stream carriage returns through it.
        enable_progress_bar=False, enable_model_summary=objects.verbose >= 1,
        profiler=objects.profiler, default_root_dir=local.root,
        accumulate_grad_batches=plan.backward_passes_per_step)
    kwargs.update(objects.trainer_args)
    trainer = pl.Trainer(**kwargs)
    if objects.profiler != "simple" and not isinstance(trainer.profiler, PassThroughProfiler):
        # As Horovod: profiler reports go with the run's logs (the "simple" one prints them).
        trainer.profiler.dirpath = local.logs
        trainer.profiler.filename = "profile"
    run_init_hooks(user_callbacks, trainer)
    return trainer, user_callbacks


def _default_logger(logs_dir: str) -> Any:
    """Horovod's default, a TensorBoardLogger under the run's logs; a CSVLogger where TensorBoard is not
    installed (as Lightning's own default does)."""
    import datetime

    from lightning_fabric.loggers.tensorboard import _TENSORBOARD_AVAILABLE, _TENSORBOARDX_AVAILABLE
    from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger

    # Each fit of a run gets its own version, so a resumed fit adds its logs beside the first one's.
    version = datetime.datetime.now(datetime.timezone.utc).strftime("fit-%Y%m%d-%H%M%S")
    if _TENSORBOARD_AVAILABLE or _TENSORBOARDX_AVAILABLE:
        return TensorBoardLogger(logs_dir, version=version)
    return CSVLogger(logs_dir, version=version)


def _data_module(plan: FitPlan, objects: LightningObjects, rank: int, size: int,
                 resume_at: tuple[int, int] | None) -> Any:
    from spark_hvd.lightning.data_module import horovod_data_module_kwargs, shard_data_module

    if objects.data_module is None:
        return shard_data_module(plan, rank, size, objects.transformation_fn, objects.debug_data_loader, resume_at)
    return objects.data_module(**horovod_data_module_kwargs(plan, objects, rank, size))


def _best_checkpoint(callbacks: list[Any]) -> str | None:
    from pytorch_lightning.callbacks import ModelCheckpoint

    for callback in callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.best_model_path:
            return callback.best_model_path
    return None


def _best_effort(fn: Any) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 - the fit's own error is the one to report
        pass
