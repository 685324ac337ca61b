"""What a torch user writes to read a Parquet image table: an IterableDataset over its row groups, read with
pyarrow, decoded per sample, batched by ``DataLoader(num_workers=k)``.

Each (rank, loader worker) pair takes every n-th row group of the epoch's shuffled order and yields its rows in
a shuffled order; where there are fewer row groups than pairs (Spark writes one per file unless told), each pair
reads every row group and takes every n-th row. ``repeat``: the stream cycles (a new shuffle each pass), for DDP
loops that take a fixed number of steps an epoch so that no rank runs out before the others.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from _input_decode import decode_crop_flip


class ParquetImages(IterableDataset):
    def __init__(self, files: Sequence[str], crop: int, *, seed: int = 0, rank: int = 0, size: int = 1,
                 repeat: bool = False) -> None:
        import pyarrow.parquet as pq

        self.pieces = [(path, group) for path in files for group in range(pq.ParquetFile(path).num_row_groups)]
        self.crop, self.seed, self.rank, self.size, self.repeat = crop, seed, rank, size, repeat
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, int]]:
        import pyarrow.parquet as pq

        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        stride, offset = self.size * workers, self.rank * workers + worker
        by_group = len(self.pieces) >= stride
        for round_ in itertools.count():
            rng = np.random.default_rng([self.seed, self.epoch, round_])
            order = rng.permutation(len(self.pieces))
            for index in order[offset::stride] if by_group else order:
                path, group = self.pieces[index]
                table = pq.ParquetFile(path).read_row_group(group, columns=["content", "label"])
                if not by_group:
                    table = table.take(np.arange(offset, table.num_rows, stride))
                contents = table.column("content").to_pylist()
                labels = table.column("label").to_numpy()
                for row in rng.permutation(len(contents)):
                    yield torch.from_numpy(decode_crop_flip(contents[row], self.crop)), int(labels[row])
            if not self.repeat:
                return


def parquet_loader(files: Sequence[str], crop: int, batch_size: int, workers: int, **dataset: Any) -> DataLoader:
    return DataLoader(ParquetImages(files, crop, **dataset), batch_size=batch_size, num_workers=workers)
