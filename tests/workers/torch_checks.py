"""Shared by the torch workers: deterministic per-rank tensors any rank can rebuild, and a case runner
that reports every case (with its failures) instead of stopping at the first."""

from __future__ import annotations

import traceback
from typing import Callable

import torch

from common import report

FLOAT_TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 6e-2, torch.float32: 1e-5, torch.float64: 1e-12}
ALL_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64]


def rank_tensor(rank: int, shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0,
                positive: bool = False) -> torch.Tensor:
    """Rank `rank`'s input; small integers so no reduction over <= 4 ranks overflows, floats near 1
    when `positive` (products stay well-conditioned)."""
    gen = torch.Generator().manual_seed(seed * 1009 + rank)
    if dtype.is_floating_point:
        low, high = (0.5, 1.5) if positive else (-1.0, 1.0)
        return (torch.rand(shape, generator=gen, dtype=torch.float64) * (high - low) + low).to(dtype)
    low, high = (1, 3) if positive else ((0, 30) if dtype == torch.uint8 else (-20, 20))
    return torch.randint(low, high + 1, shape, generator=gen, dtype=torch.int64).to(dtype)


def reference_reduce(inputs: list[torch.Tensor], op: str) -> torch.Tensor:
    """The expected reduction, in float64 (floats) or int64 (integers); Average truncates integers."""
    wide = torch.stack([t.to(torch.float64 if t.dtype.is_floating_point else torch.int64) for t in inputs])
    if op == "Sum":
        return wide.sum(0)
    if op == "Average":
        total = wide.sum(0)
        if total.dtype.is_floating_point:
            return total / len(inputs)
        return torch.div(total, len(inputs), rounding_mode="trunc")
    if op == "Product":
        return wide.prod(0)
    return wide.amin(0) if op == "Min" else wide.amax(0)


def close(result: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype | None = None) -> bool:
    dtype = dtype or result.dtype
    if result.shape != expected.shape:
        return False
    if not dtype.is_floating_point:
        return torch.equal(result.to(torch.int64), expected.to(torch.int64))
    tol = FLOAT_TOLERANCE[dtype]
    return torch.allclose(result.to(torch.float64), expected.to(torch.float64), rtol=tol, atol=tol)


class Cases:
    """Runs named cases; each gets a `check` and is reported with the list of what failed."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.failures.append(what)

    def run(self, name: str, case: Callable[["Cases"], None]) -> None:
        self.failures = []
        try:
            case(self)
        except Exception:  # noqa: BLE001 - reported, and the job goes on to the next case
            self.failures.append(traceback.format_exc(limit=6))
        report(case=name, failures=self.failures)
