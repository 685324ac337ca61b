"""One rank of bench/small_collectives.py (which starts it): times small allreduces.

    python _small_worker.py --impl {ours,gloo} --sizes 8 1024 ... --iters N [--radix K]

ours runs under collective.run, with the small calls' radix forced by Config.small_call_radix (or left to
the model: --radix 0); gloo runs under torchrun. For each size every rank times `iters` float64 SUM
allreduces in a loop started by a barrier; rank 0 prints one line per size, ``@@small {json}``, with the
slowest rank's mean time per call.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Callable

import numpy as np

MARKER = "@@small "
_WARMUP = 20


def ours(radix: int) -> tuple[int, int, Callable[[np.ndarray], None], Callable[[float], float], Callable[[], None]]:
    import collective as hvd

    hvd.init(small_call_radix=radix or None, connect_timeout_s=600)  # 64 ranks start slowly on a loaded machine

    def allreduce(buf: np.ndarray) -> None:
        hvd.allreduce_(buf, op=hvd.Sum)

    def slowest(value: float) -> float:
        box = np.array([value])
        hvd.allreduce_(box, op=hvd.Max)
        return float(box[0])

    return hvd.rank(), hvd.size(), allreduce, slowest, hvd.shutdown


def gloo() -> tuple[int, int, Callable[[np.ndarray], None], Callable[[float], float], Callable[[], None]]:
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))

    def allreduce(buf: np.ndarray) -> None:
        dist.all_reduce(torch.from_numpy(buf))

    def slowest(value: float) -> float:
        box = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(box, op=dist.ReduceOp.MAX)
        return float(box[0])

    return dist.get_rank(), dist.get_world_size(), allreduce, slowest, dist.destroy_process_group


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["ours", "gloo"], required=True)
    parser.add_argument("--radix", type=int, default=0, help="0: the model's choice")
    parser.add_argument("--sizes", type=int, nargs="+", required=True, help="bytes, multiples of 8")
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args()
    rank, size, allreduce, slowest, close = ours(args.radix) if args.impl == "ours" else gloo()
    for nbytes in args.sizes:
        buf = np.full(nbytes // 8, rank + 1.0)
        allreduce(buf)
        correct = bool(np.all(buf == size * (size + 1) / 2))
        buf[:] = 0.0
        for _ in range(_WARMUP):
            allreduce(buf)
        slowest(0.0)  # a barrier that every implementation has
        start = time.perf_counter()
        for _ in range(args.iters):
            allreduce(buf)
        mean_s = slowest((time.perf_counter() - start) / args.iters)
        all_correct = slowest(0.0 if correct else 1.0) == 0.0
        if rank == 0:
            print(MARKER + json.dumps({"impl": args.impl, "radix": args.radix, "ranks": size,
                                       "bytes": nbytes, "mean_s": mean_s, "correct": all_correct}), flush=True)
    slowest(0.0)
    close()
    sys.stdout.flush()
    if args.impl == "gloo":
        os._exit(0)  # torch+gloo may abort in its exit path; everything is printed already
    return 0


if __name__ == "__main__":
    sys.exit(main())
