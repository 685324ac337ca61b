"""Mosaic Streaming's side of the input-pipeline benchmark: the DataFrame converted to MDS shards (one writer
per Spark partition, then one merged index, as streaming's own ``dataframe_to_mds`` does), and a
``StreamingDataset`` that decodes each sample, batched by ``DataLoader(num_workers=k)``.

PyPI's torchvision (the only build on this machine's index) cannot load beside the CPU build of torch 2.13
("operator torchvision::nms does not exist"), and ``import streaming`` imports its vision datasets, which
import torchvision. Those datasets are not used here: ``streaming_package`` puts an empty module in their place
before the import, and nothing else of streaming changes.
"""

from __future__ import annotations

import os
import sys
import time
import types
from typing import Any, Iterator

COLUMNS = {"content": "bytes", "label": "int"}


def streaming_package() -> Any:
    if "streaming" not in sys.modules:
        try:
            import torchvision  # noqa: F401
        except Exception:  # noqa: BLE001 - see the module docstring
            sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))
    import streaming

    return streaming


def _write_partition(out: str, batches: Iterator[Any]) -> Iterator[Any]:
    """mapInArrow body: this partition's rows as MDS shards under out/<partition>; one row: its count."""
    import pyarrow as pa
    from pyspark import TaskContext

    writer_cls = streaming_package().MDSWriter
    rows = 0
    with writer_cls(out=os.path.join(out, f"{TaskContext.get().partitionId():05d}"), columns=COLUMNS) as writer:
        for batch in batches:
            contents = batch.column("content").to_pylist()
            labels = batch.column("label").to_pylist()
            for content, label in zip(contents, labels):
                writer.write({"content": content, "label": label})
            rows += batch.num_rows
    yield pa.RecordBatch.from_pydict({"rows": [rows]})


def convert(df: Any, out: str) -> tuple[int, float]:
    """The DataFrame's content and label as MDS under ``out``: (rows, seconds)."""
    import functools

    began = time.monotonic()
    counts = (df.select("content", "label").mapInArrow(functools.partial(_write_partition, out), "rows long")
              .collect())
    streaming_package().base.util.merge_index(out, keep_local=True)
    return sum(r["rows"] for r in counts), time.monotonic() - began


def mds_loader(local: str, crop: int, batch_size: int, workers: int) -> Any:
    from torch.utils.data import DataLoader

    streaming = streaming_package()
    from _input_decode import decode_crop_flip

    class DecodedImages(streaming.StreamingDataset):
        def get_item(self, index: int) -> tuple[Any, int]:
            import torch

            sample = super().get_item(index)
            return torch.from_numpy(decode_crop_flip(sample["content"], crop)), int(sample["label"])

    dataset = DecodedImages(local=local, batch_size=batch_size, shuffle=True, shuffle_seed=0)
    return DataLoader(dataset, batch_size=batch_size, num_workers=workers)
