"""Tensor memory as numpy arrays, and the float32 round trip float16/bfloat16 take through MPI.

MPI has no float16/bfloat16 reduction, so those reduce in float32 (all inputs combined in float32 and
rounded once to nearest-even: the native kernels' rule, so both backends give the same bits).
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

import numpy as np

from collective._native import DType
from collective.dtypes import dtype_code

# Storage dtype per DType, indexed by its code; bfloat16 is carried as its uint16 bit pattern.
STORAGE = tuple(np.uint16 if d is DType.bfloat16 else np.dtype(d.name).type for d in DType)
_STORAGE_DTYPES = tuple(np.dtype(t) for t in STORAGE)
ITEMSIZE = tuple(d.itemsize for d in _STORAGE_DTYPES)


def tensor_array(tensor: Any, dtype: DType | None,
                 shape: Sequence[int] | None) -> tuple[np.ndarray, DType, tuple[int, ...]]:
    """(flat array of the storage dtype over the tensor's memory, dtype code, shape), without a copy.

    ``tensor`` is an object with the buffer protocol, or an address (then ``dtype`` and ``shape`` say
    what lies there).
    """
    if type(tensor) is np.ndarray and dtype is not None:  # the numpy API's calls: no conversion, no new view
        if not tensor.flags.c_contiguous:
            raise ValueError("tensor memory must be C-contiguous")
        flat = tensor if tensor.ndim == 1 else tensor.reshape(-1)
        storage = _STORAGE_DTYPES[dtype]
        return (flat if flat.dtype == storage else flat.view(storage)), dtype, tensor.shape
    if isinstance(tensor, int):
        dims = tuple(int(d) for d in (shape or ()))
        count = int(np.prod(dims, dtype=np.int64)) if dims else 1
        storage = np.dtype(STORAGE[dtype])
        if count == 0 or tensor == 0:
            return np.empty(0, storage), dtype, dims
        raw = (ctypes.c_char * (count * storage.itemsize)).from_address(tensor)
        return np.frombuffer(raw, dtype=storage), dtype, dims
    array = np.asarray(tensor)
    if not array.flags.c_contiguous:
        raise ValueError("tensor memory must be C-contiguous")
    code = dtype if dtype is not None else dtype_code(array.dtype, "")
    return array.reshape(-1).view(STORAGE[code]), code, tuple(array.shape)


def is_half(code: int) -> bool:
    return code in (DType.float16, DType.bfloat16)


def to_float32(array: np.ndarray, code: int) -> np.ndarray:
    if code == DType.float16:
        return array.astype(np.float32)
    return (array.astype(np.uint32) << 16).view(np.float32)


def from_float32(values: np.ndarray, code: int, out: np.ndarray) -> None:
    """Rounds float32 ``values`` to nearest-even into ``out`` (float16, or bfloat16 bits)."""
    if code == DType.float16:
        out[...] = values.astype(np.float16)
        return
    bits = values.view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    is_nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    out[...] = np.where(is_nan, np.uint16(0x7FC0), rounded)
