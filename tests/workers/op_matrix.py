"""Every dtype x op x element count, checked against numpy on every rank."""

from __future__ import annotations

import sys

import numpy as np

import collective as hvd
from common import DTYPES, expected_reduction, rank_input, report, tolerance

OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product}


def main() -> None:
    transport = sys.argv[1]
    counts = [int(c) for c in sys.argv[2].split(",")]
    hvd.init(enable_shm=(transport == "shm"))
    rank, size = hvd.rank(), hvd.size()
    peers_on_shm = sorted({hvd.uses_shared_memory(p) for p in range(size) if p != rank})
    report(kind="transport", shm=peers_on_shm)
    failures = []
    for dtype_name, dtype in DTYPES.items():
        for op_name, op in OPS.items():
            for count in counts:
                inputs = [rank_input(r, count, dtype, op_name) for r in range(size)]
                got = hvd.allreduce(inputs[rank], op=op, name=f"{dtype_name}.{op_name}.{count}")
                want = expected_reduction(inputs, op_name, dtype, size)
                if got.dtype != dtype or got.shape != (count,):
                    failures.append(f"{dtype_name} {op_name} n={count}: got {got.dtype} {got.shape}")
                    continue
                if dtype.kind in "iu":
                    ok = np.array_equal(got, want)
                else:
                    # Inputs lie within +-10: partial sums carry absolute rounding error of that scale.
                    tol = tolerance(dtype, size)
                    ok = np.allclose(got.astype(np.float64), want, rtol=tol, atol=10 * tol)
                if not ok:
                    err = np.abs(got.astype(np.float64) - want)
                    bad = np.argsort(err)[-3:]
                    failures.append(f"{dtype_name} {op_name} n={count}: first bad {bad.tolist()} "
                                    f"got {got[bad].tolist()} want {want[bad].tolist()}")
    report(kind="matrix", failures=failures)
    hvd.shutdown()


if __name__ == "__main__":
    main()
