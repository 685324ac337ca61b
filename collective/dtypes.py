"""Maps array element types to the native core's dtype codes."""

from __future__ import annotations

import numpy as np

from collective.errors import InvalidArgumentError

# Keyed by numpy's one-letter type code, the cheapest dtype property to read on every call.
# Codes match native/common/types.h; 'E' is ml_dtypes' bfloat16.
_CODES_BY_CHAR = {"B": 0, "b": 1, "i": 2, "l": 3, "q": 3, "e": 4, "E": 5, "f": 6, "d": 7}
BFLOAT16_CODE = 5
SUPPORTED = "uint8, int8, int32, int64, float16, bfloat16, float32, float64"


def dtype_code(dtype: np.dtype, tensor_name: str) -> int:
    """The native code for a numpy dtype; raises InvalidArgumentError naming the tensor otherwise."""
    code = _CODES_BY_CHAR.get(dtype.char)
    if code is None or (code in (2, 3) and dtype.itemsize != (4 if code == 2 else 8)):
        raise InvalidArgumentError(
            f"tensor {tensor_name!r} has dtype {dtype}, which collectives do not support; use one of {SUPPORTED}")
    return code


def as_buffer(array: np.ndarray, code: int) -> np.ndarray:
    """What the binding reads: the array itself, or for bfloat16 (which numpy cannot export as a
    buffer) its bit pattern as uint16."""
    return array.view(np.uint16) if code == BFLOAT16_CODE else array
