"""Rank child: the Lightning hooks of the rank recipe (spark_hvd/recipe/rank_recipe.py): Lightning's own
``Trainer.fit`` on our strategy and data.

init: collective.torch, the seed (Horovod: the same ``random_seed`` on every rank), the device agreed by all
ranks, a local run directory mirrored to the Store -> restore: rank 0 looks for the run's resume checkpoint
-> the epochs: ``Trainer(strategy=CollectiveStrategy, callbacks=[user's..., FitRecorder], logger, ...)`` with
the user's ``trainer_args`` on top, and ``trainer.fit(module, datamodule, ckpt_path=<resume point or None>)``
(an elastic fit: one Trainer per formation, resuming from the last commit, elastic_commits.py) -> rank 0
returns the weights (those of the best checkpoint when the user gave a ModelCheckpoint, as Horovod does),
the final logged metrics (Horovod's history) and the per-epoch records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from spark_hvd.recipe.hooks import FrameworkHooks, Position, Records, Resume, WithinEpoch
from spark_hvd.recipe.plan import FitPlan

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


class LightningHooks(FrameworkHooks):
    """Lightning's loop owns most of the recipe's steps: inside ``Trainer.fit``, ``CollectiveStrategy`` scales
    the learning rates by the recipe's factor, broadcasts rank 0's parameters and wraps the optimizers, and
    Lightning restores the resume checkpoint itself. So restore only finds the run's resume point, and the
    scale, broadcast and wrap hooks are left to the strategy."""

    def __init__(self, spec: LightningRankSpec) -> None:
        self.spec, self.plan = spec, spec.plan
        self.hvd: Any = None
        self.trainer: Any = None
        self.recorder: Any = None
        self.user_callbacks: list[Any] = []
        self.start_ckpt: str | None = None       # the run's resume checkpoint of an earlier fit, if any
        self.resume: dict[str, Any] | None = None
        self.initial_weights: dict[str, Any] | None = None
        self._restore_module: Any = None
        self._local: Any = None
        self._logs_synced = False

    def init(self) -> Any:
        import pytorch_lightning as pl
        import torch

        import collective.torch as hvd
        from spark_hvd.lightning.checkpoint_io import StoreCheckpointIO
        from spark_hvd.lightning.legacy_hooks import adapt_module
        from spark_hvd.lightning.run_directory import RunDirectory
        from spark_hvd.lightning.strategy import set_rank_zero

        plan = self.plan
        _quiet_known_warnings()
        self.hvd = hvd
        hvd.init()
        set_rank_zero(hvd.rank())
        # Ranks that share a host share its cores; without this each would start one thread per core.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, hvd.local_size())))
        self.objects: LightningObjects = cloudpickle.loads(self.spec.objects)
        if self.objects.random_seed is not None:
            pl.seed_everything(self.objects.random_seed, verbose=False)
        self.device = _agreed_device(self.spec.use_gpu, self.objects.num_gpus, hvd)
        store = plan.data.store
        self._local = RunDirectory(plan.run_id, hvd.rank()).create()
        self.checkpoint_io = StoreCheckpointIO(store, store.get_checkpoint_path(plan.run_id), self._local.checkpoints,
                                               plan.fit_key)
        self.checkpointing = bool(self.objects.trainer_args.get("enable_checkpointing", True))
        self.resume_path = os.path.join(self._local.checkpoints, RESUME_FILE)
        self.module = self.objects.model
        self._restore_module = adapt_module(self.module)
        return hvd

    def restore(self) -> Resume | None:
        """The run's resume checkpoint, if there is one: Trainer.fit restores it; here, what it holds."""
        from spark_hvd.lightning.rank_callbacks import RECORDER_STATE_KEY
        from spark_hvd.recipe.checkpoint_fit import FIT_KEY, check_checkpoint_fit

        target = self.checkpoint_io.store_path(self.resume_path)
        if not self.checkpointing or not self.checkpoint_io.store.exists(target):
            return None
        checkpoint = self.checkpoint_io.load_checkpoint(self.resume_path)
        check_checkpoint_fit(self.plan, checkpoint.get(FIT_KEY))
        state = checkpoint.get("callbacks", {}).get(RECORDER_STATE_KEY, {})
        metrics = [dict(entry) for entry in state.get("epoch_metrics", [])]
        within = WithinEpoch.from_bytes(state["within"]) if state.get("within") else None
        return Resume(len(metrics), Records([dict(entry) for entry in metrics], metrics),
                      framework={"epochs_done": len(metrics), "stopped": bool(state.get("stopped"))}, within=within)

    def adopt(self, resume: Resume) -> None:
        self.resume = resume.framework
        self.start_ckpt = self.resume_path if resume.framework is not None else None

    def scale_learning_rate(self, factor: float) -> None:
        pass    # CollectiveStrategy scales by the events' lr_factor; a commit keeps the rates unscaled

    def communication_wait_s(self) -> float:
        optimizers = self.trainer.strategy.optimizers if self.trainer is not None else []
        return float(sum(getattr(optimizer, "communication_wait_s", 0.0) for optimizer in optimizers))

    def run_epochs(self, start: Position, events: Any) -> None:
        hvd = self.hvd
        ckpt_path = self._formation_checkpoint(events.state) if events.elastic else self._start_checkpoint(start)
        self.recorder = _recorder(self.checkpointing, events)
        self.trainer, self.user_callbacks = _trainer(self.plan, self.objects, self.device, events.lr_factor,
                                                     self.checkpoint_io, self._local, self.recorder, self.resume)
        data = _data_module(self.plan, self.objects, hvd.rank(), hvd.size(), start if start.step else None)
        self.trainer.fit(self.module, datamodule=data, ckpt_path=ckpt_path)

    def _start_checkpoint(self, start: Position) -> str | None:
        """Where a static fit's Trainer resumes from: the run's resume checkpoint, its position in the epoch
        moved to ``start.step`` when it was written inside an epoch at another size."""
        from spark_hvd.lightning.elastic_commits import checkpoint_at_step

        if self.start_ckpt is None or not start.step:
            return self.start_ckpt
        checkpoint = self.checkpoint_io.load_checkpoint(self.start_ckpt)
        return checkpoint_at_step(checkpoint, start.epoch, start.step, self._local.root)

    def _formation_checkpoint(self, state: Any) -> str | None:
        """Where a formation's Trainer resumes from: the last commit, else the run's resume checkpoint of an
        earlier fit; a job re-formed before either starts again from the module as given."""
        from spark_hvd.lightning.elastic_commits import committed_checkpoint

        if state.checkpoint is not None:
            return committed_checkpoint(state, self._local.root)
        if self.start_ckpt is None:
            self.module.load_state_dict(self.initial_weights)
        return self._start_checkpoint(Position(state.epoch, state.step))

    def save(self, epoch: int, records: Records, lr_factor: float, within: WithinEpoch | None = None) -> None:
        # Lightning's save is collective (a barrier), and writes from rank 0 through StoreCheckpointIO; inside
        # an epoch it holds Lightning's loop position there, and the recorder's state where the data stands.
        if self.checkpointing:
            self.recorder.within = within.to_bytes() if within is not None else None
            self.trainer.save_checkpoint(self.resume_path, weights_only=False)
        if within is None or not within.step:
            self._sync_logs()

    def elastic_state(self, records: Records, attrs: dict[str, Any]) -> Any:
        self.initial_weights = {name: value.detach().clone() for name, value in self.module.state_dict().items()}
        return self.hvd.elastic.ObjectState(checkpoint=None, history=records.history,
                                            epoch_metrics=records.epoch_metrics, **attrs)

    def fill_commit(self, state: Any) -> None:
        from spark_hvd.lightning.elastic_commits import checkpoint_bytes

        # A static fit's checkpoint inside an epoch is Lightning's own (save): nothing to carry beside it.
        if hasattr(state, "checkpoint"):
            state.checkpoint = checkpoint_bytes(self.trainer)

    fill_epoch_commit = fill_commit

    def result(self, records: Records, lr_factor: float) -> dict[str, Any]:
        from spark_hvd.lightning.rank_callbacks import scalar_metrics
        from spark_hvd.torch.state_bytes import torch_bytes

        self._sync_logs()
        self._logs_synced = True
        best = _best_checkpoint(self.user_callbacks)
        state = self.checkpoint_io.load_checkpoint(best)["state_dict"] if best else self.module.state_dict()
        return {"state_dict": torch_bytes({name: value.detach().cpu() for name, value in state.items()}),
                # Horovod's history is trainer.logged_metrics; a refit of a finished run logs nothing new.
                "history": scalar_metrics(self.trainer.logged_metrics) or dict(self.recorder.logged),
                "epoch_metrics": list(records.epoch_metrics)}

    def close(self) -> None:
        # Everything worth keeping is in the Store by the end (checkpoints as written, logs here).
        try:
            if not self._logs_synced:
                _best_effort(self._sync_logs)
            if self._restore_module is not None:
                self._restore_module()
        finally:
            if self._local is not None:
                self._local.remove()

    def _sync_logs(self) -> None:
        if self.hvd.rank() == 0:
            self._local.sync_logs(self.plan.data.store, self.plan.run_id)


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


def _recorder(checkpointing: bool, events: Any) -> Any:
    from spark_hvd.lightning.rank_callbacks import FitRecorder, PlainFitRecorder

    return (FitRecorder if checkpointing else PlainFitRecorder)(events, events.lr_factor)


def _trainer(plan: FitPlan, objects: LightningObjects, device: Any, lr_factor: float, checkpoint_io: Any,
             local: Any, recorder: Any, resume: dict[str, Any] | None) -> tuple[Any, list[Any]]:
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
    callbacks = [*user_callbacks, *([TerminateOnNan()] if objects.terminate_on_nan else []), recorder]
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


def _data_module(plan: FitPlan, objects: LightningObjects, rank: int, size: int, resume_at: Position | None) -> Any:
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
