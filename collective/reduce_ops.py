"""Reduce operations, under the names Horovod scripts use (``hvd.Sum``, ``hvd.Average``...).

``ReduceOp`` is the native core's enum (native/common/types.h), exported by the binding.
"""

from __future__ import annotations

from collective._native import ReduceOp

Sum = ReduceOp.SUM
Average = ReduceOp.AVERAGE
Min = ReduceOp.MIN
Max = ReduceOp.MAX
Product = ReduceOp.PRODUCT


def resolve_op(op: ReduceOp | int | None, average: bool | None, default: ReduceOp = Average) -> ReduceOp:
    """Horovod's rule: ``op`` wins; the deprecated ``average=`` flag maps to Average/Sum."""
    if op is not None and average is not None:
        raise ValueError("pass either op= or the deprecated average=, not both")
    if op is None:
        if average is None:
            return default
        return Average if average else Sum
    try:
        return ReduceOp(int(op))
    except ValueError:
        raise ValueError(f"unknown reduce op {op!r}; use Sum, Average, Min, Max or Product") from None
