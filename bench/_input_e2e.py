"""The input-pipeline benchmark's end-to-end fit: the same CNN on the same JPEG rows, two ways.

- ours: ``TorchEstimator(num_proc=n)`` on the binary ``content`` column, the shared decode as its per-row
  ``transformation_fn``, ``train_reader_num_workers=k``; the fit's wall time, and where each epoch's time
  went (``model.getEpochTimes()``: input wait, compute, communication).
- peer: pyspark's ``TorchDistributor(num_processes=n, local_mode=True)`` running DDP (gloo) with
  ``DataLoader(num_workers=k)`` over the same columns written to Parquet by ``df.write.parquet`` (part of its
  wall time, as the materialisation is part of ours), read with the pyarrow dataset of _input_torch_loader;
  each rank takes the steps ours takes, and times its own waits for the loader.

Both sides: SGD with momentum at the same learning rate (not scaled by the ranks), batch per rank, epochs,
one torch thread per rank (what Spark gives a task).
"""

from __future__ import annotations

import glob
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from _input_model import resnet18_like
from _input_torch_loader import ParquetImages

LR = 0.05


@dataclass(frozen=True)
class E2ESettings:
    ranks: int
    workers: int
    batch: int
    epochs: int
    crop: int
    width: int


def class_loss(output: Any, label: Any) -> Any:
    from torch import nn

    return nn.functional.cross_entropy(output, label.long())


def fit_ours(df: Any, settings: E2ESettings) -> dict[str, Any]:
    import torch

    from _input_decode import RowDecoder
    from spark_hvd import Store, TorchEstimator
    from spark_hvd.recipe.epoch_times import shares

    model = resnet18_like(settings.width)
    estimator = TorchEstimator(
        num_proc=settings.ranks, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9),
        loss=class_loss, feature_cols=["content"], label_cols=["label"], batch_size=settings.batch,
        epochs=settings.epochs, shuffle=True, verbose=0, learning_rate_scaling="none",
        transformation_fn=RowDecoder(settings.crop), train_reader_num_workers=settings.workers,
        store=Store.create(tempfile.mkdtemp(prefix="bench-input-e2e-store-")))
    began = time.monotonic()
    fitted = estimator.fit(df)
    wall = time.monotonic() - began
    epochs = fitted.getEpochTimes()
    total = {key: sum(e[key] for e in epochs) for key in ("input_s", "compute_s", "communication_s")}
    return {"wall": wall, "timings": fitted.getFitTimings(), "epochs": epochs,
            "shares": shares(total), "epoch_shares": [shares(e) for e in epochs],
            "loss": [e["loss"] for e in fitted.getEpochMetrics()]}


def ddp_train(files: list[str], rows: int, settings: E2ESettings) -> dict[str, Any]:
    """TorchDistributor's side, in each of its processes (env:// rendezvous set up by torchrun)."""
    import time as clock

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader

    # resnet18_like and ParquetImages are this module's globals, which travel with the function by value: the
    # torchrun processes cannot import the bench folder.
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    dataset = ParquetImages(files, settings.crop, seed=0, rank=rank, size=size, repeat=True)
    loader = DataLoader(dataset, batch_size=settings.batch, num_workers=settings.workers)
    model = nn.parallel.DistributedDataParallel(resnet18_like(settings.width))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    steps = rows // (size * settings.batch)      # every rank the same steps, as ours' lockstep feed
    waited = worked = 0.0
    losses = []
    began = clock.monotonic()
    for epoch in range(settings.epochs):
        dataset.set_epoch(epoch)
        batches = iter(loader)
        total = 0.0
        for _ in range(steps):
            fetch = clock.monotonic()
            images, labels = next(batches)
            start = clock.monotonic()
            optimizer.zero_grad()
            loss = class_loss(model(images), labels)
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
            waited += start - fetch
            worked += clock.monotonic() - start
        del batches
        losses.append(total / steps)
    trained = clock.monotonic() - began
    dist.destroy_process_group()
    return {"train": trained, "input_s": waited, "step_s": worked, "loss": losses}


def fit_torch_distributor(df: Any, settings: E2ESettings) -> dict[str, Any]:
    from pyspark.ml.torch.distributor import TorchDistributor

    began = time.monotonic()
    path = os.path.join(tempfile.mkdtemp(prefix="bench-input-e2e-td-"), "data")
    df.select("content", "label").write.parquet(path)
    written = time.monotonic()
    files = sorted(glob.glob(os.path.join(path, "*.parquet")))
    result = TorchDistributor(num_processes=settings.ranks, local_mode=True, use_gpu=False).run(
        ddp_train, files, df.count(), settings)
    wall = time.monotonic() - began
    return {"wall": wall, "write": written - began, "train": result["train"], "loss": result["loss"],
            "input_share": result["input_s"] / max(1e-9, result["input_s"] + result["step_s"])}
