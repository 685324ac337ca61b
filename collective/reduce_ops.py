"""Reduce operations, under the names Horovod scripts use (``hvd.Sum``, ``hvd.Average``...).

``ReduceOp`` is the native core's enum (native/common/types.h), exported by the binding.
"""

from __future__ import annotations

from typing import Any

from collective._native import ReduceOp
from collective.errors import InvalidArgumentError

Sum = ReduceOp.SUM
Average = ReduceOp.AVERAGE
Min = ReduceOp.MIN
Max = ReduceOp.MAX
Product = ReduceOp.PRODUCT


class NotImplementedOp:
    """A reduce op Horovod has that this package does not implement. The name exists, so that scripts and
    tests that mention it import and can catch the error; any collective given it raises
    NotImplementedError (a RuntimeError, which Horovod's torch ops raise for an op they refuse)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


Adasum = NotImplementedOp("Adasum")


def resolve_op(op: ReduceOp | int | None, average: bool | None, default: ReduceOp = Average) -> ReduceOp:
    """Horovod's rule: ``op`` wins; the deprecated ``average=`` flag maps to Average/Sum."""
    if op is not None and average is not None:
        raise ValueError("pass either op= or the deprecated average=, not both")
    if op is None:
        if average is None:
            return default
        return Average if average else Sum
    if isinstance(op, NotImplementedOp):
        raise NotImplementedError(f"op={op.name} is not implemented here; use Sum or Average (see the migration "
                                  "guide)")
    try:
        return ReduceOp(int(op))
    except (TypeError, ValueError):
        raise ValueError(f"unknown reduce op {op!r}; use Sum, Average, Min, Max or Product") from None


def scale_factor(value: Any, parameter: str) -> float:
    """A prescale or postscale factor as the float the engine takes. Anything that is not a real number
    is refused, naming ``parameter``; so is a string, which ``float`` would otherwise parse."""
    if not isinstance(value, (str, bytes)):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    raise InvalidArgumentError(f"{parameter} must be a real number, got {value!r}")


def scale_factors(prescale: Any, postscale: Any) -> tuple[float, float]:
    """Both factors of a call, checked: what every entry point to a transport passes on."""
    return scale_factor(prescale, "prescale_factor"), scale_factor(postscale, "postscale_factor")
