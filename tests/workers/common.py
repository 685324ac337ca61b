"""Shared by the worker scripts: deterministic inputs every rank can recompute, and result reporting."""

from __future__ import annotations

import json
import sys
from typing import Callable

import ml_dtypes
import numpy as np

DTYPES = {
    "uint8": np.dtype(np.uint8),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "uint16": np.dtype(np.uint16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
}


# Far from the group ids the grouped calls hand out, so a held name never joins a real group.
HOLDING_GROUP = 1_000_000


def submit_duplicate_while_held(engine: object, kind: object, name: str) -> None:
    """Submits `name` twice while the first is certainly in flight, then lets both finish.

    The first call is a group member whose partner is not yet submitted, so no engine round can
    complete it before the duplicate arrives (a submit wakes the engine, so a lone call may finish
    before the next Python line). Raises whatever the duplicate submit raises.
    """
    first, second = np.ones(2, np.float32), np.ones(2, np.float32)
    group = {"group": HOLDING_GROUP, "group_size": 2}
    held = engine.submit(kind, name, first, **group)
    try:
        engine.submit(kind, name, second, **group)
    finally:
        partner = engine.submit(kind, f"{name}.partner", second, **group)
        engine.wait(held)
        engine.wait(partner)


def report(**record: object) -> None:
    print("RESULT " + json.dumps(record), flush=True)


def rank_input(rank: int, count: int, dtype: np.dtype, op: str, seed: int = 0) -> np.ndarray:
    """The array rank `rank` contributes; any rank can rebuild every other rank's input."""
    rng = np.random.default_rng([seed, rank, count])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if op == "Product":
            values = rng.integers(-3 if info.min < 0 else 0, 4, size=count)
        elif dtype.itemsize <= 2:
            values = rng.integers(info.min, info.max, size=count, endpoint=True)  # sums wrap around
        else:
            values = rng.integers(-1000 if info.min < 0 else 0, 1000, size=count)
        return values.astype(dtype)
    if op == "Product":
        return rng.uniform(0.5, 1.5, size=count).astype(dtype)
    return rng.uniform(-10, 10, size=count).astype(dtype)


def expected_reduction(inputs: list[np.ndarray], op: str, dtype: np.dtype, size: int) -> np.ndarray:
    """numpy's answer. Integers wrap like the native kernels; floats reduce in float64 then round."""
    if dtype.kind in "iu":
        stack = np.stack(inputs)
        if op in ("Sum", "Average"):
            total = np.add.reduce(stack, axis=0, dtype=dtype)
            if op == "Average":
                return np.trunc(total.astype(np.float64) / size).astype(dtype)
            return total
        if op == "Product":
            return np.multiply.reduce(stack, axis=0, dtype=dtype)
        return (np.min if op == "Min" else np.max)(stack, axis=0)
    stack = np.stack([x.astype(np.float64) for x in inputs])
    if op == "Sum":
        return stack.sum(axis=0)
    if op == "Average":
        return stack.sum(axis=0) / size
    if op == "Product":
        return stack.prod(axis=0)
    return (np.min if op == "Min" else np.max)(stack, axis=0)


def tolerance(dtype: np.dtype, size: int) -> float:
    return {"float16": 4e-3, "bfloat16": 3e-2, "float32": 1e-5, "float64": 1e-12}[dtype.name] * size


def fail(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Cases:
    """Registers a worker's test cases and runs them all, so one job reports every broken case."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self._cases: list[tuple[str, Callable[[], None]]] = []

    def __call__(self, fn: Callable[[], None]) -> Callable[[], None]:
        self._cases.append((fn.__name__, fn))
        return fn

    def run_and_report(self, kind: str) -> None:
        for name, fn in self._cases:
            try:
                fn()
            except Exception as exc:  # report and keep going
                self.failures.append(f"{name} raised {type(exc).__name__}: {exc}")
        report(kind=kind, failures=self.failures, ran=[name for name, _ in self._cases])
