"""The reduction kernels through the binding, once per instruction set, against numpy."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = r"""
import sys
import ml_dtypes
import numpy as np
from collective import _native

isa = sys.argv[1]
_native.limit_reduce_isa(isa)
assert _native.reduce_isa() == isa, _native.reduce_isa()
codes = {np.uint8: 0, np.int8: 1, np.int32: 2, np.int64: 3, np.float16: 4, ml_dtypes.bfloat16: 5,
         np.float32: 6, np.float64: 7}
rng = np.random.default_rng(1)
for dtype, code in codes.items():
    for op, fn in ((0, np.add), (2, np.minimum), (3, np.maximum), (4, np.multiply)):
        for count in (0, 1, 7, 1000, 100_003):
            # One byte of offset: the kernels must not need aligned pointers.
            raw_a = np.zeros(count * np.dtype(dtype).itemsize + 1, np.uint8)
            a = raw_a[1:].view(dtype)
            a[:] = (rng.uniform(-50, 50, count) if np.dtype(dtype).kind in "fV" or dtype is ml_dtypes.bfloat16
                    else rng.integers(-100, 100, count)).astype(dtype)
            b = a[::-1].copy()
            if count > 3 and dtype in (np.float32, np.float64):
                a[3] = np.nan
            want = fn(a.astype(np.float32) if np.dtype(dtype).itemsize == 2 and dtype is not np.int8 else a, b)
            want = want.astype(dtype)
            _native.reduce_arrays(a.ctypes.data, b.ctypes.data, count, code, op)
            same = np.array_equal(a.view(np.uint8) if count == 0 else a.astype(np.float64),
                                  a.view(np.uint8) if count == 0 else want.astype(np.float64), equal_nan=True)
            assert same, (isa, np.dtype(dtype).name, op, count, a[:5], want[:5])
print("ok", isa)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("isa", ["baseline", "avx2", "avx512"])
def test_kernels_match_numpy(isa: str) -> None:
    from collective import _native

    best = _native.reduce_isa()
    order = ["baseline", "avx2", "avx512"]
    if order.index(isa) > order.index(best):
        pytest.skip(f"this CPU only runs up to {best}")
    proc = subprocess.run([sys.executable, "-c", CHECK, isa], capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == f"ok {isa}"


def test_unknown_isa_is_rejected() -> None:
    from collective import _native
    from collective.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="sse9"):
        _native.limit_reduce_isa("sse9")
