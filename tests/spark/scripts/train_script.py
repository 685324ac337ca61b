"""A torch.distributed training script, as torchrun (or pyspark's TorchDistributor) runs one:

    train_script.py --parallel ddp|fsdp --steps N --out FILE

Every rank trains; rank 0 writes the final weights to FILE as JSON.
"""

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/spark, for torch_training
import torch_training  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parallel", choices=["ddp", "fsdp"], required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    train = torch_training.train_ddp if args.parallel == "ddp" else torch_training.train_fsdp
    result = train(args.steps)
    if os.environ["RANK"] == "0":
        partial = args.out + ".partial"
        with open(partial, "w", encoding="utf-8") as f:
            json.dump(result, f)
        os.replace(partial, args.out)


if __name__ == "__main__":
    main()
