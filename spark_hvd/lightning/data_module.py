"""The LightningDataModule of a fit (rank child): this rank's RankFeeds as lockstep DataLoaders.

Every epoch each loader yields exactly the plan's number of steps on every rank (the readers wrap around
uneven shards), so no rank's allreduce waits for a rank that ran out of data. Batches are dicts of
tensors (see batch_tensors.py); the epoch is the trainer's, so each epoch reshuffles as the plan says and
a resumed fit continues the same sequence. An elastic fit that resumes mid-epoch (``resume_at``) skips the
batches its epoch already trained, so the loader still counts the epoch's steps and Lightning's restored
position lines up with the batch it reads.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, IterableDataset

from spark_hvd.lightning.batch_tensors import batch_dict
from spark_hvd.recipe.plan import FitPlan


class LockstepBatches(IterableDataset):
    """The current epoch's batches of ``feed`` (a RankFeed), each converted by ``convert``."""

    def __init__(self, feed: Any, epoch: Callable[[], int],
                 convert: Callable[[dict[str, Any]], dict[str, torch.Tensor]],
                 skip: Callable[[int], int] = lambda epoch: 0) -> None:
        super().__init__()
        self.feed, self.epoch, self.convert, self.skip = feed, epoch, convert, skip

    def __len__(self) -> int:
        return self.feed.steps

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        epoch = self.epoch()
        for batch in self.feed.epoch(epoch, skip=self.skip(epoch)):
            yield self.convert(batch)


def _as_is(batch: Any) -> Any:
    return batch      # batches arrive whole from the reader; a DataLoader must not collate them again


class ShardDataModule(pl.LightningDataModule):
    """The training loader; a fit with a validation split uses ValidatedShardDataModule (a data module that
    defines val_dataloader gets a validation loop, or a warning where the module has no validation_step)."""

    def __init__(self, plan: FitPlan, rank: int, size: int, transformation_fn: Any, debug: bool = False,
                 resume_at: Any = None) -> None:
        super().__init__()
        self.plan, self.rank, self.size, self.transformation_fn = plan, rank, size, transformation_fn
        self.debug = debug        # Horovod's debug_data_loader: say what each loader reads
        self.resume_at = resume_at   # the recipe's Position inside an epoch, where a resume takes it up
        self.feeds: dict[str, Any] = {}

    def setup(self, stage: str) -> None:
        if not self.feeds:
            resume = self.resume_at.data if self.resume_at is not None else None
            self.feeds = self.plan.feeds(self.rank, self.size, self.transformation_fn, resume=resume)

    def teardown(self, stage: str) -> None:
        for feed in self.feeds.values():
            feed.close()
        self.feeds = {}

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self._trained_steps)

    def _trained_steps(self, epoch: int) -> int:
        if self.resume_at is None or self.resume_at.epoch != epoch:
            return 0
        return self.resume_at.step

    def _loader(self, split: str, skip: Callable[[int], int] = lambda epoch: 0) -> DataLoader:
        feed = self.feeds[split]
        if self.debug:
            print(f"rank {self.rank}: {split} loader: {feed.steps} steps an epoch of {feed.reader.batch_size} rows, "
                  f"from a split of {feed.reader.rows} rows", flush=True)
        dataset = LockstepBatches(feed, self._epoch, self._convert, skip)
        # In this process: the reader is this rank's shard, which loader workers would each read again. A
        # generator of its own: each new iterator draws a seed from it, which would otherwise come from torch's
        # global generator, so a fit resumed mid-epoch would draw one more than an unbroken one (dropout's).
        return DataLoader(dataset, batch_size=None, collate_fn=_as_is, num_workers=0,
                          generator=torch.Generator().manual_seed(0))

    def _epoch(self) -> int:
        return self.trainer.current_epoch if self.trainer is not None else 0

    def _convert(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        from spark_hvd.torch.batch_tensors import model_dtype

        module = self.trainer.lightning_module if self.trainer is not None else None
        dtype = model_dtype(module) if module is not None else torch.get_default_dtype()
        return batch_dict(batch, dtype)


class ValidatedShardDataModule(ShardDataModule):
    def val_dataloader(self) -> DataLoader:
        return self._loader("val")


def shard_data_module(plan: FitPlan, rank: int, size: int, transformation_fn: Any, debug: bool = False,
                      resume_at: Any = None) -> ShardDataModule:
    cls = ValidatedShardDataModule if plan.val_steps else ShardDataModule
    return cls(plan, rank, size, transformation_fn, debug, resume_at)


def horovod_data_module_kwargs(plan: FitPlan, objects: Any, rank: int, size: int) -> dict[str, Any]:
    """The keywords Horovod builds a user's ``data_module`` class with (its PetastormDataModule's), pointing at
    this fit's Parquet splits under the Store and this rank's shard."""
    data, options = plan.data, dict(objects.data_module_options)
    has_val = plan.val_steps > 0
    fields = [*plan.feature_cols, *plan.label_cols, *([plan.sample_weight_col] if plan.sample_weight_col else [])]
    return {
        "train_dir": data.store.url(data.path("train")),
        "val_dir": data.store.url(data.path("val")) if has_val else None,
        "num_train_epochs": plan.epochs, "has_val": has_val, "train_batch_size": plan.batch_size,
        "val_batch_size": plan.val_batch_size, "shuffle": plan.shuffle,
        "num_reader_epochs": options.get("loader_num_epochs"), "reader_pool_type": options.get("reader_pool_type"),
        # Horovod's default where ours is None (chosen by the rank).
        "reader_worker_count": options.get("train_reader_num_workers") or 2,
        "transformation": objects.transformation_fn,
        "transformation_edit_fields": plan.transformation_edit_fields,
        "transformation_removed_fields": plan.transformation_removed_fields,
        "inmemory_cache_all": plan.inmemory_cache_all, "cur_shard": rank, "shard_count": size,
        "schema_fields": fields, "storage_options": data.store.storage_options,
        "steps_per_epoch_train": plan.train_steps, "steps_per_epoch_val": plan.val_steps,
        "verbose": objects.verbose > 0, "debug_data_loader": objects.debug_data_loader,
        "train_async_data_loader_queue_size": options.get("train_async_data_loader_queue_size"),
        "val_async_data_loader_queue_size": options.get("val_async_data_loader_queue_size"),
        "seed": objects.random_seed,
    }
