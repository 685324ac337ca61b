"""Petastorm's side of the input-pipeline benchmark; runs in the Petastorm venv (pyarrow 14, numpy 1):

    .venv-petastorm/bin/python bench/_input_petastorm.py --url file:///.../train --crop 192 --batch 64 \
        --workers 2 --epochs 3 --rows 10000

``make_batch_reader`` over the Parquet files with a ``TransformSpec`` that decodes each row with the shared
decode (its process pool of --workers), re-batched by ``petastorm.pytorch.BatchedDataLoader``, the loader
Petastorm pairs with its batch reader. One reader serves every epoch, so its pool starts once; an epoch
ends when its rows have arrived. Prints one JSON line: {"epoch_s": [...], "rows": rows per epoch}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--crop", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--rows", type=int, required=True)
    args = parser.parse_args()
    from petastorm import TransformSpec, make_batch_reader
    from petastorm.pytorch import BatchedDataLoader

    crop = args.crop

    def decode(frame):
        # Petastorm's pool processes unpickle this with dill and find the bench folder on PYTHONPATH.
        from _input_decode import decode_crop_flip

        frame["content"] = frame["content"].map(lambda content: decode_crop_flip(content, crop))
        return frame

    spec = TransformSpec(decode, edit_fields=[("content", np.uint8, (3, crop, crop), False)],
                         selected_fields=["content", "label"])
    began = time.monotonic()
    epoch_s, seen, touched = [], 0, 0
    with make_batch_reader(args.url, schema_fields=["content", "label"], reader_pool_type="process",
                           workers_count=args.workers, num_epochs=args.epochs, transform_spec=spec,
                           shuffle_row_groups=True) as reader:
        for batch in BatchedDataLoader(reader, batch_size=args.batch):
            touched += int(batch["content"][:, 0, 0, 0].sum()) + int(batch["label"].sum())
            seen += len(batch["label"])
            while seen >= args.rows * (len(epoch_s) + 1) and len(epoch_s) < args.epochs:
                epoch_s.append(time.monotonic() - began - sum(epoch_s))
    print(json.dumps({"epoch_s": epoch_s, "rows": args.rows, "touched": touched}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
