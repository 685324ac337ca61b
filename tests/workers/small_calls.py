"""Small calls, whose gathers take log-round schedules at large p: every dtype x op (and scaled) allreduce
against numpy, with a digest of the raw result bytes to compare across ranks; a mismatch; small allgather,
broadcast and barrier. Runs directly, then through the engine.

    small_calls.py PHASE [PHASE ...]     PHASE: direct or engine (the engine, once started, stays)
"""

from __future__ import annotations

import hashlib
import sys

import numpy as np

import collective as hvd
from collective.runtime import start_engine
from common import DTYPES, expected_reduction, rank_input, report, tolerance

OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product}
COUNTS = (1, 7)
# Scale factors that are exact in every float format, so numpy can apply them too.
PRESCALE, POSTSCALE = 0.5, 4.0


def cases() -> list[tuple[str, np.dtype, str, float, float]]:
    out = []
    for dtype_name, dtype in DTYPES.items():
        for op_name in OPS:
            out.append((dtype_name, dtype, op_name, 1.0, 1.0))
        if dtype.kind == "f":
            out += [(dtype_name, dtype, op, PRESCALE, POSTSCALE) for op in ("Sum", "Average")]
    return out


def check_allreduces(phase: str, rank: int, size: int) -> None:
    failures, digest = [], hashlib.sha256()
    for dtype_name, dtype, op_name, pre, post in cases():
        for count in COUNTS:
            label = f"{dtype_name} {op_name} x{pre}/{post} n={count}"
            inputs = [rank_input(r, count, dtype, op_name) for r in range(size)]
            got = hvd.allreduce(inputs[rank], op=OPS[op_name], name=f"{phase}.{label}", prescale_factor=pre,
                                postscale_factor=post)
            digest.update(got.tobytes())
            scaled = [(x.astype(np.float64) * pre).astype(dtype) for x in inputs] if pre != 1.0 else inputs
            want = expected_reduction(scaled, op_name, dtype, size) * post
            if got.dtype != dtype or got.shape != (count,):
                failures.append(f"{label}: got {got.dtype} {got.shape}")
            elif dtype.kind in "iu":
                if not np.array_equal(got, want):
                    failures.append(f"{label}: got {got.tolist()} want {want.tolist()}")
            elif not np.allclose(got.astype(np.float64), want, rtol=tolerance(dtype, size),
                                 atol=10 * tolerance(dtype, size) * post):
                failures.append(f"{label}: got {got.tolist()} want {want.tolist()}")
    report(kind="allreduce", phase=phase, failures=failures, digest=digest.hexdigest())


def check_mismatch(phase: str, rank: int) -> None:
    try:
        hvd.allreduce(np.ones(3, np.float32 if rank == 1 else np.float64), name=f"{phase}.mismatch")
    except hvd.MismatchError as exc:
        report(kind="mismatch", phase=phase, message=str(exc))
    else:
        report(kind="mismatch", phase=phase, message=None)


def check_others(phase: str, rank: int, size: int) -> None:
    failures = []
    got = hvd.allgather(np.full((rank % 3, 2), rank, np.int16), name=f"{phase}.gather")
    want = np.concatenate([np.full((r % 3, 2), r, np.int16) for r in range(size)])
    if not np.array_equal(got, want):
        failures.append(f"allgather: got {got.ravel()[:8].tolist()}")
    root = size - 2
    got = hvd.broadcast(np.full(5, rank, np.float32), root_rank=root, name=f"{phase}.bcast")
    if not np.array_equal(got, np.full(5, root, np.float32)):
        failures.append(f"broadcast: got {got.tolist()}")
    hvd.barrier()
    report(kind="others", phase=phase, failures=failures)


def main() -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    for phase in sys.argv[1:]:
        if phase == "engine":
            start_engine()
        check_allreduces(phase, rank, size)
        check_mismatch(phase, rank)
        check_others(phase, rank, size)
    hvd.shutdown()


if __name__ == "__main__":
    main()
