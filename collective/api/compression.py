"""Rank: gradient compression for allreduce, framework-neutral: floating tensors travel in a narrower dtype and
come back in their own. ``collective.torch.compression`` and ``collective.tensorflow.compression`` supply only
how their tensors are cast."""

from __future__ import annotations

from typing import Any


class Compressor:
    """Interface: ``compress`` returns the tensor to send and a context; ``decompress`` undoes it."""

    @staticmethod
    def compress(tensor: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: Any, ctx: Any) -> Any:
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor: Any) -> tuple[Any, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: Any, ctx: Any) -> Any:
        return tensor


class CastCompressor(Compressor):
    """Casts floating tensors to ``wire_dtype``; integer tensors pass unchanged. A framework subclass says what
    a floating dtype is and how its tensors are cast."""

    wire_dtype: Any

    @staticmethod
    def is_floating(dtype: Any) -> bool:
        raise NotImplementedError

    @staticmethod
    def cast(tensor: Any, dtype: Any) -> Any:
        raise NotImplementedError

    @classmethod
    def compress(cls, tensor: Any) -> tuple[Any, Any]:
        if cls.is_floating(tensor.dtype) and tensor.dtype != cls.wire_dtype:
            return cls.cast(tensor, cls.wire_dtype), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor: Any, ctx: Any) -> Any:
        return tensor if ctx is None else cls.cast(tensor, ctx)
