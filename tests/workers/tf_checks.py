"""Shared by the TensorFlow workers: quiet TensorFlow, run a function eagerly or as a tf.function, and
report every case (with its failures) instead of stopping at the first."""

from __future__ import annotations

import os
import traceback
from typing import Any, Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow is imported
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from common import report  # noqa: E402

MODES = ("eager", "graph")


def in_mode(mode: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Calls ``fn`` eagerly, or traced into a fresh tf.function."""
    return tf.function(fn)(*args) if mode == "graph" else fn(*args)


def to_numpy(value: Any) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


class Checks:
    """Collects what failed in one case."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.failures.append(what)

    def close(self, got: Any, want: np.ndarray, what: str, tol: float = 1e-6) -> None:
        got = to_numpy(got)
        if got.shape != want.shape:
            self.failures.append(f"{what}: shape {got.shape}, want {want.shape}")
        elif not np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol):
            self.failures.append(f"{what}: got {got.ravel()[:6].tolist()}, want {want.ravel()[:6].tolist()}")

    def raises(self, error: type[BaseException], match: str, fn: Callable[[], Any], what: str) -> None:
        try:
            fn()
        except error as exc:
            if match not in str(exc):
                self.failures.append(f"{what}: {type(exc).__name__} without {match!r}: {exc}")
            return
        except Exception as exc:  # noqa: BLE001 - the wrong kind of error is a failure to report
            self.failures.append(f"{what}: raised {type(exc).__name__} instead of {error.__name__}: {exc}")
            return
        self.failures.append(f"{what}: no {error.__name__} raised")


def run_cases(cases: list[Callable[[Checks, str], None]], modes: tuple[str, ...] = MODES) -> None:
    """Runs each case in each mode and reports RESULT {"case", "mode", "failures"}."""
    for case in cases:
        for mode in modes:
            checks = Checks()
            try:
                case(checks, mode)
            except Exception:  # noqa: BLE001 - reported, and the job goes on to the next case
                checks.failures.append(traceback.format_exc(limit=8))
            report(case=case.__name__, mode=mode, failures=checks.failures)
