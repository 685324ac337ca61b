"""What the engine needs to know about a torch tensor, and turning its results back into tensors.

The engine reads and writes tensor memory directly through ``data_ptr()``, so everything handed to it
must be a dense, C-contiguous CPU tensor of a supported dtype; the helpers here either check that or
make a contiguous copy the caller writes back.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from collective import _native
from collective._native import CollectiveKind, DType
from collective.dtypes import SUPPORTED, split_counts
from collective.errors import InvalidArgumentError
from collective.runtime import size

# torch names every native DType as the native table does.
_DTYPE_CODES = {getattr(torch, d.name): d for d in DType}
# What the engine carries as tensors (anything else, e.g. bool or complex, goes some other way).
ENGINE_DTYPES = frozenset(_DTYPE_CODES)
# numpy has no bfloat16, so its results are viewed through int16 and reinterpreted by torch.
_NUMPY_VIEWS = {torch_dtype: np.int16 if d is DType.bfloat16 else np.dtype(d.name).type
                for torch_dtype, d in _DTYPE_CODES.items()}


def label(name: str | None) -> str:
    """How error messages refer to a tensor."""
    return repr(name) if name else "(unnamed)"


def check_tensor(tensor: Any, name: str | None) -> DType:
    """Validates a tensor for the engine and returns its native dtype code."""
    if not isinstance(tensor, torch.Tensor):
        raise InvalidArgumentError(f"tensor {label(name)} must be a torch.Tensor, got {type(tensor).__name__}")
    check_device(tensor.device, name)
    if tensor.layout != torch.strided:
        raise InvalidArgumentError(f"tensor {label(name)} has layout {tensor.layout}; only dense tensors are supported")
    code = _DTYPE_CODES.get(tensor.dtype)
    if code is None:
        raise InvalidArgumentError(
            f"tensor {label(name)} has dtype {tensor.dtype}, which collectives do not support; use one of {SUPPORTED}")
    return code


def check_device(device: torch.device, name: str | None) -> None:
    # CUDA tensors are routed to collective/torch/routes/cuda_ops.py before they reach the engine.
    if device.type not in ("cpu", "cuda"):
        raise InvalidArgumentError(f"tensor {label(name)} is on {device}; only CPU and CUDA tensors are supported")


def contiguous_input(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor itself when the engine can read it in place, else a contiguous copy."""
    data = tensor.detach()
    return data if data.is_contiguous() else data.contiguous()


def contiguous_clone(tensor: torch.Tensor) -> torch.Tensor:
    """A fresh contiguous copy, the output buffer of an out-of-place op."""
    return tensor.detach().clone(memory_format=torch.contiguous_format)


def from_flat(flat: np.ndarray, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """Wraps an engine result buffer (flat uint8) as a tensor, without copying."""
    result = torch.from_numpy(flat.view(_NUMPY_VIEWS[dtype]).reshape(tuple(shape)))
    return result.view(torch.bfloat16) if dtype == torch.bfloat16 else result


def split_list(splits: Any, name: str | None) -> list[int]:
    """Alltoall splits given as a list, tuple, numpy array or tensor, as plain ints; non-integers are refused."""
    if isinstance(splits, torch.Tensor):
        splits = splits.detach().cpu()
        # numpy has no bfloat16; as float32 it is refused all the same.
        splits = (splits.float() if splits.dtype == torch.bfloat16 else splits).numpy()
    return split_counts(splits, label(name))


def checked_call(kind: CollectiveKind, tensor: torch.Tensor, name: str | None, root: int = -1,
                 splits: Any = None) -> list[int]:
    """Checks a call that the native core does not see (CUDA tensors go to NCCL) by its op's own rule
    (native/algorithms/<op>.cc). Returns alltoall's rows per rank: ``splits``, or Horovod's default, the
    first dimension divided evenly."""
    given = [] if splits is None else split_list(splits, name)
    return list(_native.validate_call(kind, name or "", list(tensor.shape), root, given, size()))
