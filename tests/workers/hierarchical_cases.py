"""Allreduce on ranks given host keys of a chosen layout (2 x 2 interleaved, 3 + 1): every dtype x op, with
and without scales, through direct calls and the engine (fused), plus the bytes each rank sent per transport.

argv: layout (one host name per rank, comma-separated), hierarchical mode (on/off/auto: one for all ranks, or
one per rank, comma-separated), element counts."""

from __future__ import annotations

import hashlib
import sys

import numpy as np

import collective as hvd
from collective._native import CollectiveKind as kinds
from collective.config import config_from_env
from collective.dtypes import as_buffer, dtype_code
from collective.runtime import bytes_sent, start_engine
from common import DTYPES, expected_reduction, rank_input, report, tolerance

MODES = {"on": True, "off": False, "auto": None}
# (name, op, prescale, postscale)
VARIANTS = [("Sum", hvd.Sum, 1.0, 1.0), ("Average", hvd.Average, 1.0, 1.0), ("Min", hvd.Min, 1.0, 1.0),
            ("Max", hvd.Max, 1.0, 1.0), ("Product", hvd.Product, 1.0, 1.0),
            ("Sum.scaled", hvd.Sum, 0.5, 3.0), ("Average.scaled", hvd.Average, 2.0, 0.25)]
TRAFFIC_ELEMENTS = 1 << 18  # float32: 1 MiB, far past the one-round size


def digest(array: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def check(got: np.ndarray, inputs: list[np.ndarray], variant: tuple, dtype: np.dtype, size: int) -> str | None:
    """What is wrong with `got` against numpy, or None. Scaled integer results are only compared with the
    flat ring's (by digest, in the test): their rounding is the kernels' to define."""
    name, _, pre, post = variant
    base = name.split(".")[0]
    if dtype.kind in "iu":
        if pre != 1.0 or post != 1.0:
            return None
        return None if np.array_equal(got, expected_reduction(inputs, base, dtype, size)) else "differs from numpy"
    want = expected_reduction(inputs, base, dtype, size) * pre * post
    tol = tolerance(dtype, size) * max(pre * post, 1.0)
    if np.allclose(got.astype(np.float64), want, rtol=tol, atol=10 * tol):
        return None
    bad = int(np.argmax(np.abs(got.astype(np.float64) - want)))
    return f"element {bad}: got {got[bad]} want {want[bad]}"


def other_collectives(rank: int, size: int) -> list[str]:
    """Allgather, reducescatter and broadcast, whose rings and chains also run host by host."""
    failures = []
    rows = 5000  # past the one-round size, so the ring runs
    gathered = hvd.allgather(np.full((rows + rank, 3), rank, np.int32), name="gather")
    want = np.concatenate([np.full((rows + r, 3), r, np.int32) for r in range(size)])
    if not np.array_equal(gathered, want):
        failures.append("allgather differs from the concatenation in rank order")
    parts = [rank_input(r, 4 * rows + 3, np.dtype(np.int64), "Sum", seed=1) for r in range(size)]
    mine = hvd.reducescatter(parts[rank], op=hvd.Sum, name="scatter")
    share = np.array_split(np.sum(parts, axis=0), size)[rank]
    if not np.array_equal(mine, share):
        failures.append(f"reducescatter: rank {rank} did not get its own share")
    for root in range(size):
        got = hvd.broadcast(np.full(rows * 4, rank, np.float64), root_rank=root, name=f"bcast.{root}")
        if not np.all(got == root):
            failures.append(f"broadcast from root {root} gave {got[:3]}")
    return failures


def main() -> None:
    layout = sys.argv[1].split(",")
    modes = sys.argv[2].split(",")  # one for every rank, or one per rank
    counts = [int(c) for c in sys.argv[3].split(",")]
    rank = config_from_env().rank
    # A per-job prefix keeps these keys from meaning anything outside this job.
    mode = modes[rank] if len(modes) > 1 else modes[0]
    hvd.init(host_key=f"emulated-{layout[rank]}", hierarchical_allreduce=MODES[mode])
    size = hvd.size()
    report(kind="topology", local_size=hvd.local_size(), cross_size=hvd.cross_size(),
           shm=[hvd.uses_shared_memory(p) if p != rank else None for p in range(size)])

    before = bytes_sent()
    hvd.allreduce(np.ones(TRAFFIC_ELEMENTS, np.float32), op=hvd.Sum, name="traffic")
    after = bytes_sent()
    report(kind="traffic", elements=TRAFFIC_ELEMENTS, **{k: after[k] - before[k] for k in after})

    cases = [(dtype_name, dtype, variant, count) for dtype_name, dtype in DTYPES.items() for variant in VARIANTS
             for count in counts]
    inputs = {(d, v[0], n): [rank_input(r, n, dt, v[0].split(".")[0]) for r in range(size)] for d, dt, v, n in cases}
    failures: list[str] = []
    digests: dict[str, str] = {}

    def record(path: str, dtype_name: str, dtype: np.dtype, variant: tuple, count: int, got: np.ndarray) -> None:
        key = f"{path} {dtype_name} {variant[0]} n={count}"
        digests[key] = digest(got)
        if got.dtype != dtype or got.shape != (count,):
            failures.append(f"{key}: got {got.dtype} {got.shape}")
            return
        wrong = check(got, inputs[(dtype_name, variant[0], count)], variant, dtype, size)
        if wrong:
            failures.append(f"{key}: {wrong}")

    for dtype_name, dtype, variant, count in cases:
        name, op, pre, post = variant
        got = hvd.allreduce(inputs[(dtype_name, name, count)][rank], op=op, name=f"{dtype_name}.{name}.{count}",
                            prescale_factor=pre, postscale_factor=post)
        record("direct", dtype_name, dtype, variant, count, got)

    failures += other_collectives(rank, size)

    # Through the engine: everything submitted at once, so tensors of one dtype, op and scales fuse.
    engine = start_engine()
    tensors = [np.array(inputs[(d, v[0], n)][rank], copy=True) for d, _, v, n in cases]
    handles = [engine.submit(kinds.ALLREDUCE, f"engine.{d}.{v[0]}.{n}", as_buffer(t, code), code, op=v[1],
                             prescale=v[2], postscale=v[3])
               for (d, _, v, n), t in zip(cases, tensors) for code in [dtype_code(t.dtype, d)]]
    for handle in handles:
        engine.wait(handle)
    for (dtype_name, dtype, variant, count), got in zip(cases, tensors):
        record("engine", dtype_name, dtype, variant, count, got)

    report(kind="cases", failures=failures, digests=digests)
    hvd.shutdown()


if __name__ == "__main__":
    main()
