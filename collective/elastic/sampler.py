"""The bookkeeping behind Horovod's ``ElasticSampler``: which samples of an epoch are processed, and how the
rest are split among the ranks of the current formation. Framework-neutral; collective.torch wraps it."""

from __future__ import annotations

import math
import random
from typing import Any, Iterable


class ElasticPartition:
    """An epoch's sample indices, shuffled by ``seed + epoch`` alike on every rank, less the processed
    ones, padded to a multiple of the size and dealt out by rank (as torch's DistributedSampler deals)."""

    def __init__(self, num_samples: int, shuffle: bool = True, seed: int = 0) -> None:
        if num_samples < 0:
            raise ValueError(f"the dataset's length must be >= 0, got {num_samples}")
        self.total = num_samples
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed: set[int] = set()
        self.rank, self.size = 0, 1
        self.indices: list[int] = []
        self.num_samples = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.processed = set()

    def repartition(self, rank: int, size: int) -> None:
        """The share of ``rank`` among ``size`` ranks of the samples not processed yet this epoch."""
        self.rank, self.size = rank, size
        order = list(range(self.total))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        remaining = [i for i in order if i not in self.processed]
        self.num_samples = math.ceil(len(remaining) / size) if remaining else 0
        padded_size = self.num_samples * size
        if remaining:
            remaining += remaining[: padded_size - len(remaining)]
        self.indices = remaining[rank:padded_size:size]

    def batch_indices(self, batch_idx: int, batch_size: int) -> list[int]:
        """This rank's sample indices of its batch ``batch_idx`` since the last re-partition."""
        return self.indices[batch_idx * batch_size:(batch_idx + 1) * batch_size]

    def record(self, indices: Iterable[int]) -> None:
        self.processed.update(int(i) for i in indices)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "processed_indices": sorted(self.processed)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.processed = set(state["processed_indices"])
