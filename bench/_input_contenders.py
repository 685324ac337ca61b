"""The input-pipeline benchmark's contenders: each delivers the epochs' decoded batches to a loop that touches
them (no model), on one rank, with the same decode and the same number of decode workers.

Each returns the seconds of each epoch and the images delivered per epoch. The first epoch includes starting
the contender's workers; the later ones show its steady rate.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Iterable

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class FeedSettings:
    crop: int
    batch: int
    workers: int
    epochs: int


@dataclass
class Delivery:
    epoch_s: list[float]
    images: int              # per epoch

    def rates(self) -> list[float]:
        return [self.images / seconds for seconds in self.epoch_s]


def _touch(images: Any, labels: Any) -> int:
    """Reads one pixel of each image and every label: the batch must really be there, at almost no cost."""
    import torch

    return int(torch.as_tensor(images)[:, 0, 0, 0].sum()) + int(torch.as_tensor(labels).sum())


def _timed_epochs(epochs: Iterable[Iterable[tuple[Any, Any]]]) -> tuple[list[float], int]:
    seconds, images = [], 0
    for batches in epochs:
        began, images = time.monotonic(), 0
        for pixels, labels in batches:
            _touch(pixels, labels)
            images += len(labels)
        seconds.append(time.monotonic() - began)
    return seconds, images


def ours(data: Any, settings: FeedSettings) -> Delivery:
    """The rank's reader and RankFeed as a TorchEstimator rank builds them (FitPlan.feeds) for one rank."""
    from _input_decode import RowDecoder
    from spark_hvd.data import make_reader, steps_per_epoch
    from spark_hvd.data.feed.rank_feed import RankFeed, Transformation

    reader = make_reader(data, "train", 0, 1, settings.batch, shuffle=True, seed=0)
    feed = RankFeed(reader, steps_per_epoch(data.train_rows, 1, settings.batch),
                    Transformation(RowDecoder(settings.crop)), workers=settings.workers)
    try:
        seconds, images = _timed_epochs(((b["content"], b["label"]) for b in feed.epoch(epoch))
                                        for epoch in range(settings.epochs))
    finally:
        feed.close()
    return Delivery(seconds, images)


def torch_dataloader(files: list[str], settings: FeedSettings) -> Delivery:
    from _input_torch_loader import parquet_loader

    loader = parquet_loader(files, settings.crop, settings.batch, settings.workers, seed=0)

    def epoch(index: int) -> Iterable[tuple[Any, Any]]:
        loader.dataset.set_epoch(index)
        return loader

    return Delivery(*_timed_epochs(epoch(e) for e in range(settings.epochs)))


def mosaic(local: str, settings: FeedSettings) -> Delivery:
    from _input_mosaic import mds_loader

    loader = mds_loader(local, settings.crop, settings.batch, settings.workers)
    return Delivery(*_timed_epochs(loader for _ in range(settings.epochs)))


def petastorm(python: str, url: str, rows: int, settings: FeedSettings) -> Delivery:
    """Runs _input_petastorm.py in the Petastorm venv; its JSON line holds the epochs' seconds."""
    command = [python, os.path.join(HERE, "_input_petastorm.py"), "--url", url, "--crop", str(settings.crop),
               "--batch", str(settings.batch), "--workers", str(settings.workers), "--epochs",
               str(settings.epochs), "--rows", str(rows)]
    # Its own venv's packages only (this process's PYTHONPATH may name another venv's), and the bench folder
    # for its pool's processes.
    env = {**{k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}, "PYTHONPATH": HERE}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the Petastorm contender failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    result = json.loads(lines[-1])
    return Delivery(result["epoch_s"], result["rows"])
