"""Maps numpy element types to the native core's ``DType`` (defined once, in native/common/types.h, and
exported by the binding)."""

from __future__ import annotations

import numpy as np

from collective._native import SUPPORTED_DTYPES as SUPPORTED, DType
from collective.errors import InvalidArgumentError

# Keyed by numpy's one-letter type code, the cheapest dtype property to read on every call. numpy names
# every type as DType does but bfloat16, which is ml_dtypes' (code 'E'); 'q' is numpy's other 8-byte int.
# Built from this platform's numpy, so a code's size is right here ('l' is int64 on Linux, int32 elsewhere).
_BY_CHAR = {np.dtype(d.name).char: d for d in DType if d is not DType.bfloat16}
_BY_CHAR.update({np.dtype(np.longlong).char: DType.int64, "E": DType.bfloat16})


def dtype_code(dtype: np.dtype, tensor_name: str) -> DType:
    """The native DType of a numpy dtype; raises InvalidArgumentError naming the tensor otherwise."""
    code = _BY_CHAR.get(dtype.char)
    if code is None:
        raise InvalidArgumentError(
            f"tensor {tensor_name!r} has dtype {dtype}, which collectives do not support; use one of {SUPPORTED}")
    return code


def as_buffer(array: np.ndarray, code: DType) -> np.ndarray:
    """What the binding reads: the array itself, or for bfloat16 (which numpy cannot export as a
    buffer) its bit pattern as uint16."""
    return array.view(np.uint16) if code is DType.bfloat16 else array


def split_counts(splits: object, tensor_name: str) -> list[int]:
    """Alltoall's ``splits`` (rows per destination rank, a sequence or an integer array) as plain ints.

    Non-integer splits are refused, as Horovod refuses them, rather than truncated to rows nobody asked for."""
    array = np.asarray(splits)
    if array.size and array.dtype.kind not in "iu":
        raise InvalidArgumentError(
            f"alltoall {tensor_name}: splits must be integers (rows per rank), got dtype {array.dtype}")
    return [int(s) for s in array.reshape(-1)]
