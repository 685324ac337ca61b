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
codes = {ml_dtypes.bfloat16 if d.name == "bfloat16" else np.dtype(d.name).type: int(d) for d in _native.DType}
assert {np.int16, np.uint16} <= set(codes), codes
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
            half = dtype in (np.float16, ml_dtypes.bfloat16)
            want = fn(a.astype(np.float32) if half else a, b)
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


def test_integer_scaling_truncates_toward_zero_as_horovod() -> None:
    """Horovod casts each scaled double back to the integer type: 13.5 -> 13, -13.5 -> -13."""
    import numpy as np

    from collective import _native

    for code in (d for d in _native.DType if np.dtype(d.name if d.name != "bfloat16" else "f2").kind in "iu"):
        dtype = np.dtype(code.name)
        values = np.array([9, -9, 3, -3, 1], dtype=np.int64)
        if dtype.kind == "u":
            values = np.abs(values)
        array = values.astype(dtype)
        _native.scale_array(array.ctypes.data, array.size, code, 1.5)
        assert array.tolist() == np.trunc(values * 1.5).astype(np.int64).tolist(), code.name
    # Out of range still saturates rather than wrapping.
    small = np.array([100, -100], np.int16)
    _native.scale_array(small.ctypes.data, small.size, _native.DType.int16, 1000.0)
    assert small.tolist() == [32767, -32768]
