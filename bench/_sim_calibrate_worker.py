"""Rank child of bench/sim_calibrate.py: times mesh formation and allreduce at a few sizes on one transport.

    python -m collective.run -np N bench/_sim_calibrate_worker.py --transport {shm,tcp} --sizes 256 65536 ...

Rank 0 prints one line ``@@simcal {json}``: the formation time (the last rank's init start to the last
rank's init end, so start-up skew between processes is not counted) and, per size, the slowest rank's
median per-call time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

MARKER = "@@simcal "


def _max_over_ranks(hvd, value: float) -> float:
    box = np.array([value], dtype=np.float64)
    hvd.allreduce_(box, op=hvd.Max)
    return float(box[0])


def _time_size(hvd, nbytes: int, budget_s: float) -> float:
    buf = np.ones(nbytes // 4, dtype=np.float32)
    for _ in range(2):
        hvd.allreduce_(buf, op=hvd.Sum)
    t0 = time.perf_counter()
    hvd.allreduce_(buf, op=hvd.Sum)
    one = _max_over_ranks(hvd, time.perf_counter() - t0)
    iters = int(min(100, max(3, budget_s / max(one, 1e-6))))
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        hvd.allreduce_(buf, op=hvd.Sum)
        samples.append(time.perf_counter() - t0)
    return _max_over_ranks(hvd, statistics.median(samples))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=("shm", "tcp"), required=True)
    parser.add_argument("--sizes", type=int, nargs="+", required=True)
    parser.add_argument("--budget-s", type=float, default=1.0)
    args = parser.parse_args()
    import collective as hvd

    start = time.time()
    hvd.init(enable_shm=args.transport == "shm")
    end = time.time()
    last_start = _max_over_ranks(hvd, start)
    last_end = _max_over_ranks(hvd, end)
    times = {str(n): _time_size(hvd, n, args.budget_s) for n in args.sizes}
    if hvd.rank() == 0:
        print(MARKER + json.dumps({"ranks": hvd.size(), "transport": args.transport,
                                   "formation_s": last_end - last_start, "allreduce_s": times}), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
