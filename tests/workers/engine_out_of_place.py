"""Out-of-place allreduces through the engine (``submit(..., source=)``): the result lands in the output,
bit for bit what the same allreduce gives in place, and the input is never written. Sizes cover every
path: fused small calls, the direct exchange, the ring (which reads the input where it is), and odd
counts, over shared memory or TCP (argv[1]); prescaling and the errors that name the call are checked too."""

from __future__ import annotations

import sys

import numpy as np

import collective as hvd
from collective._native import CollectiveKind as kinds
from collective.dtypes import as_buffer, dtype_code
from collective.errors import InvalidArgumentError
from collective.runtime import start_engine
from common import DTYPES, Cases, expected_reduction, rank_input, tolerance

OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product}
# 3: inside the negotiation; 1000: the direct exchange; the rest: the ring (odd counts split unevenly).
COUNTS = (3, 1000, 100_003, (1 << 20) + 7)


def main() -> None:
    hvd.init(enable_shm=sys.argv[1] == "shm")
    engine = start_engine()
    rank, size = hvd.rank(), hvd.size()
    case = Cases()
    failures = case.failures

    def out_of_place(name: str, source: np.ndarray, op: int, **scales: float) -> np.ndarray:
        output = np.full_like(source, 99)  # anything left unwritten shows up
        code = dtype_code(source.dtype, name)
        engine.wait(engine.submit(kinds.ALLREDUCE, name, as_buffer(output, code), code, op=op,
                                  source=as_buffer(source, code), **scales))
        return output

    def in_place(name: str, source: np.ndarray, op: int, **scales: float) -> np.ndarray:
        work = source.copy()
        code = dtype_code(source.dtype, name)
        engine.wait(engine.submit(kinds.ALLREDUCE, name, as_buffer(work, code), code, op=op, **scales))
        return work

    @case
    def every_path_matches_in_place() -> None:
        for dtype_name in ("float32", "float64", "int32", "bfloat16", "float16"):
            dtype = DTYPES[dtype_name]
            for count in COUNTS:
                for op_name in ("Sum", "Average", "Max") if count > 1000 else tuple(OPS):
                    source = rank_input(rank, count, dtype, op_name)
                    source.setflags(write=False)  # a read-only view must do, as TensorFlow's are
                    kept = source.copy()
                    label = f"{dtype_name}.{count}.{op_name}"
                    got = out_of_place(f"oop.{label}", source, OPS[op_name])
                    want = in_place(f"inp.{label}", source, OPS[op_name])
                    if not np.array_equal(source.view(np.uint8), kept.view(np.uint8)):
                        failures.append(f"{label}: the input was written")
                    if not np.array_equal(got.view(np.uint8), want.view(np.uint8)):
                        failures.append(f"{label}: out of place {got[:3]} differs from in place {want[:3]}")
                    if count == COUNTS[2] and dtype_name in ("float64", "int32"):  # numpy's answer, once per path
                        inputs = [rank_input(r, count, dtype, op_name) for r in range(size)]
                        expected = expected_reduction(inputs, op_name, dtype, size)
                        if not np.allclose(got.astype(np.float64), expected, rtol=tolerance(dtype, size) if
                                           dtype.kind == "f" else 0, atol=0):
                            failures.append(f"{label}: {got[:3]} is not numpy's {expected[:3]}")

    @case
    def scaled_and_fused_calls() -> None:
        # Whole numbers, so that the sums are exact in any order: these calls may or may not be fused
        # (as they arrive), and fusion moves the ring's chunk boundaries, hence 3 ranks' order of addition.
        sources = [(np.arange(n) % 7 + rank).astype(np.float32) for n in (10, 300, 200_000)]
        outputs = [np.zeros_like(s) for s in sources]
        handles = [engine.submit(kinds.ALLREDUCE, f"scaled.{i}", out, op=hvd.Sum, prescale=0.5, postscale=3.0,
                                 source=src) for i, (src, out) in enumerate(zip(sources, outputs))]
        for handle in handles:
            engine.wait(handle)
        for i, (src, out) in enumerate(zip(sources, outputs)):
            want = in_place(f"scaled.check.{i}", src, hvd.Sum, prescale=0.5, postscale=3.0)
            if not np.array_equal(out, want):
                failures.append(f"scaled.{i}: {out[:3]} differs from in place {want[:3]}")
        # Small calls submitted together are fused: each one's output gets its own share.
        smalls = [np.full(5 + i, float(rank + i), np.float64) for i in range(6)]
        outs = [np.zeros_like(s) for s in smalls]
        handles = [engine.submit(kinds.ALLREDUCE, f"fused.{i}", o, op=hvd.Sum, source=s)
                   for i, (s, o) in enumerate(zip(smalls, outs))]
        for handle in handles:
            engine.wait(handle)
        for i, out in enumerate(outs):
            want = sum(r + i for r in range(size))
            if not np.all(out == want) or not np.all(smalls[i] == rank + i):
                failures.append(f"fused.{i}: output {out[:2]}, input {smalls[i][:2]}, want {want}")

    @case
    def bad_sources_name_the_call() -> None:
        out = np.zeros(4, np.float32)
        for name, kind, source, words in (
                ("bad.kind", kinds.BROADCAST, np.ones(4, np.float32), "allreduce only"),
                ("bad.size", kinds.ALLREDUCE, np.ones(5, np.float32), "5"),
                ("bad.dtype", kinds.ALLREDUCE, np.ones(4, np.float64), "float64")):
            try:
                engine.submit(kind, name, out, root=0, source=source)
            except InvalidArgumentError as exc:
                if name not in str(exc) or words not in str(exc):
                    failures.append(f"{name}: the error does not name the call and the problem: {exc}")
            else:
                failures.append(f"{name}: accepted")
        # A refused call used up nothing: the same names work on every rank afterwards.
        for name in ("bad.kind", "bad.size", "bad.dtype"):
            got = out_of_place(name, np.full(4, float(rank), np.float32), hvd.Sum)
            if not np.all(got == sum(range(size))):
                failures.append(f"{name} after its refusal: {got}")

    case.run_and_report("out_of_place")
    hvd.shutdown()


if __name__ == "__main__":
    main()
