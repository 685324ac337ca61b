"""LightningModules and callbacks the Lightning estimator tests train with. The tests register this module with
cloudpickle.register_pickle_by_value, so ranks and executors need not import the tests."""

from __future__ import annotations

import json
import os

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn

from estimator_models import XorNet


class Classifier(pl.LightningModule):
    """A small MLP over ``batch['features']`` for integer ``batch['label']`` classes. Logs ``train_loss`` every
    step, ``val_loss`` and ``val_acc`` per epoch, and ``rank_mean`` (this rank's number, averaged over the
    ranks with sync_dist) next to ``rank_here`` (not synchronised, so rank 0 logs 0)."""

    def __init__(self, features: int = 4, classes: int = 3, hidden: int = 16, lr: float = 0.05, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))
        self.lr = lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = F.cross_entropy(self(batch["features"]), batch["label"])
        self.log("train_loss", loss)
        return loss

    def on_train_epoch_end(self) -> None:
        self.log("rank_mean", float(self.trainer.global_rank), sync_dist=True)
        self.log("rank_here", float(self.trainer.global_rank))

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        logits = self(batch["features"])
        self.log("val_loss", F.cross_entropy(logits, batch["label"]), sync_dist=True)
        self.log("val_acc", (logits.argmax(dim=1) == batch["label"]).float().mean(), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class Regressor64(pl.LightningModule):
    """``y = x @ w + b`` in float64, trained with SGD and momentum on the mean squared error: deterministic, so a
    2-rank fit can be compared with a single process exactly."""

    def __init__(self, features: int = 3, lr: float = 0.05, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.linear = nn.Linear(features, 1).double()
        self.lr = lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).squeeze(-1)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = F.mse_loss(self(batch["x"]), batch["y"])
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


class RankLog(pl.Callback):
    """Writes ``rank-<r>.json`` into ``directory``: the epochs this rank trained and its batches in each."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.batches: dict[int, int] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.batches[trainer.current_epoch] = self.batches.get(trainer.current_epoch, 0) + 1

    def on_train_end(self, trainer, pl_module) -> None:
        path = os.path.join(self.directory, f"rank-{trainer.global_rank}.json")
        previous = json.load(open(path)) if os.path.exists(path) else []
        with open(path, "w") as f:
            json.dump(previous + [{"rank": trainer.global_rank, "world_size": trainer.world_size,
                                   "batches": self.batches}], f)


class FailOnceAtEpoch(pl.Callback):
    """Raises on ``rank`` when ``epoch`` starts, once: the marker file it leaves makes the next fit pass."""

    def __init__(self, marker: str, rank: int, epoch: int) -> None:
        self.marker, self.rank, self.epoch = marker, rank, epoch

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.global_rank == self.rank and trainer.current_epoch == self.epoch and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError(f"injected failure on rank {self.rank} at epoch {self.epoch}")


class HorovodEraNet(pl.LightningModule):
    """Written the way Horovod 0.28's Lightning example writes its module (Lightning 1.x): a flat feature vector
    reshaped in forward, float labels cast in the step, ``validation_epoch_end`` over the step outputs."""

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1 = nn.Linear(4, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float().reshape((-1, 4))
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), -1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.5)

    def training_step(self, batch, batch_idx):
        loss = F.nll_loss(self(batch["features"]), batch["label"].long())
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        loss = F.nll_loss(self(batch["features"]), batch["label"].long())
        self.log("val_loss", loss)
        return {"val_loss": loss}

    def validation_epoch_end(self, outputs):
        avg_loss = torch.stack([x["val_loss"] for x in outputs]).mean() if len(outputs) > 0 else float("inf")
        self.log("avg_val_loss", avg_loss)


class HorovodEraCounter(pl.Callback):
    """The example's callback: Lightning 1.x hooks (``on_init_*``, ``on_epoch_end``) next to 2.x ones, with the
    example's check at the end; the counts go to ``rank-<r>.json`` in ``directory``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.init_calls = 0
        self.epoch_end_counter = 0
        self.train_epoch_end_counter = 0
        self.validation_epoch_end_counter = 0

    def on_init_start(self, trainer):
        self.init_calls += 1

    def on_init_end(self, trainer):
        self.init_calls += 1

    def on_epoch_end(self, trainer, model):
        self.epoch_end_counter += 1

    def on_train_epoch_end(self, trainer, model, unused=None):
        self.train_epoch_end_counter += 1

    def on_validation_epoch_end(self, trainer, model, unused=None):
        self.validation_epoch_end_counter += 1

    def on_train_end(self, trainer, model):
        assert self.epoch_end_counter == self.train_epoch_end_counter + self.validation_epoch_end_counter
        with open(os.path.join(self.directory, f"rank-{trainer.global_rank}.json"), "w") as f:
            json.dump({"init": self.init_calls, "epoch_end": self.epoch_end_counter,
                       "train_epoch_end": self.train_epoch_end_counter,
                       "validation_epoch_end": self.validation_epoch_end_counter,
                       "avg_val_loss": float(trainer.callback_metrics["avg_val_loss"])}, f)


class ParquetShardData(pl.LightningDataModule):
    """A user's data module in Horovod's style: each rank builds it with Horovod's keywords and reads its own
    shard of the fit's training Parquet with pyarrow. ``record_dir`` (set on a subclass) receives the
    keywords it was given, as ``kwargs-rank-<r>.json``."""

    record_dir = ""

    def __init__(self, train_dir, cur_shard, shard_count, train_batch_size, steps_per_epoch_train, schema_fields,
                 **kwargs):
        super().__init__()
        self.train_dir, self.cur_shard, self.shard_count = train_dir, cur_shard, shard_count
        self.batch_size, self.steps, self.fields = train_batch_size, steps_per_epoch_train, schema_fields
        with open(os.path.join(self.record_dir, f"kwargs-rank-{cur_shard}.json"), "w") as f:
            json.dump({"cur_shard": cur_shard, "shard_count": shard_count, "steps": steps_per_epoch_train,
                       "fields": schema_fields, "has_val": kwargs["has_val"], "train_dir": train_dir}, f)

    def train_dataloader(self):
        import numpy as np
        import pyarrow.dataset as ds

        table = ds.dataset(self.train_dir, format="parquet").to_table(columns=self.fields)
        mine = np.arange(self.cur_shard, table.num_rows, self.shard_count)
        features = np.stack(table["features"].to_numpy(zero_copy_only=False))[mine].astype(np.float32)
        labels = table["label"].to_numpy()[mine]
        batches = [{"features": torch.from_numpy(features[i * self.batch_size:(i + 1) * self.batch_size]),
                    "label": torch.from_numpy(labels[i * self.batch_size:(i + 1) * self.batch_size])}
                   for i in range(self.steps)]
        return torch.utils.data.DataLoader(batches, batch_size=None)


class ElasticVictim(pl.LightningModule):
    """A float64 classifier for the elastic tests: its network is ``elastic_victim.KilledAtStep`` (rank 1 dies
    at a given training step), trained by SGD with momentum and a StepLR schedule, so that a resumed fit
    must bring back the optimizer's and the scheduler's state to end where an unbroken one would."""

    def __init__(self, kill_at_call: int, marker: str | None = None, lr: float = 0.05) -> None:
        super().__init__()
        import elastic_victim

        self.net = elastic_victim.KilledAtStep(4, 3, victim_rank=1, kill_at_call=kill_at_call, marker=marker)
        self.lr = lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = F.cross_entropy(self(batch["features"]), batch["label"])
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        # Where Lightning is in the epoch and the rate it trains at: each epoch's record keeps the last ones.
        self.log("batch_idx", float(batch_idx), on_step=True, on_epoch=False)
        self.log("lr", self.optimizers().param_groups[0]["lr"], on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.log("val_loss", F.cross_entropy(self(batch["features"]), batch["label"]), sync_dist=True)

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class RecordingModule(pl.LightningModule):
    """``row_recording.RecordingNet`` (float64, dropout; each training step writes down its rows' ids, and a
    chosen rank fails at a chosen step: ``fail``) trained by SGD with momentum and a step-wise StepLR, so that
    a resumed fit must bring back the generators, the optimizer's and the scheduler's state and the data
    position to end where an unbroken one would."""

    def __init__(self, record_dir: str, fail: tuple[int, int, int] | None = None, lr: float = 0.02) -> None:
        super().__init__()
        import row_recording

        self.net = row_recording.RecordingNet(4, 3, record_dir, fail=fail)
        self.lr = lr

    def forward(self, features: torch.Tensor, ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(features, ids)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = F.cross_entropy(self(batch["features"], batch["id"]), batch["label"].long())
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.8)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class Xor(XorNet, pl.LightningModule):
    """Horovod's Lightning XOR test module: forward takes the features as transform reshapes them."""

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.02)

    def training_step(self, batch, batch_idx):
        loss = F.binary_cross_entropy(self(batch["features"]), batch["y"].float().reshape(-1, 1))
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", F.binary_cross_entropy(self(batch["features"]), batch["y"].float().reshape(-1, 1)))


class LegacyXor(XorNet):
    """Horovod's LegacyXOR: a plain torch module for the Lightning estimator's legacy path."""


class LegacyConvNet(nn.Module):
    """Horovod's legacy MNIST net in small: a conv over the 4 features seen as a 1x2x2 image (input_shapes), its
    argument named unlike the column (so it is called positionally), log-probabilities out."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(1, 8, kernel_size=1)
        self.fc = nn.Linear(32, 3)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        assert image.shape[1:] == (1, 2, 2), image.shape
        return F.log_softmax(self.fc(F.relu(self.conv(image)).flatten(1)), -1)
