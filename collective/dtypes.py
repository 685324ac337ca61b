"""Maps array element types to the native core's dtype codes."""

from __future__ import annotations

import numpy as np

from collective.errors import InvalidArgumentError

# Codes match native/common/types.h.
_CODES = {
    np.dtype(np.uint8): 0,
    np.dtype(np.int8): 1,
    np.dtype(np.int32): 2,
    np.dtype(np.int64): 3,
    np.dtype(np.float16): 4,
    np.dtype(np.float32): 6,
    np.dtype(np.float64): 7,
}
BFLOAT16_CODE = 5
SUPPORTED = "uint8, int8, int32, int64, float16, bfloat16, float32, float64"


def dtype_code(dtype: np.dtype, tensor_name: str) -> int:
    """The native code for a numpy dtype; bfloat16 is recognised by name (ml_dtypes provides it)."""
    dtype = np.dtype(dtype)
    code = _CODES.get(dtype)
    if code is not None:
        return code
    if dtype.name == "bfloat16":
        return BFLOAT16_CODE
    raise InvalidArgumentError(
        f"tensor {tensor_name!r} has dtype {dtype}, which collectives do not support; use one of {SUPPORTED}")
