"""The helpers of ``horovod.common.util`` that Horovod scripts and tests import: build queries,
``gpu_available``, ``check_extension``, ``env``, ``split_list`` and ``is_version_greater_equal_than``."""

from __future__ import annotations

import contextlib
import importlib.util
import re
import os
from typing import Any, Iterator, Sequence, TypeVar

from collective.api.capabilities import (ccl_built, cuda_built, ddl_built, gloo_built, mpi_built, nccl_built,
                                     rocm_built, sycl_built)

T = TypeVar("T")

# Horovod's extension names ("horovod.torch") and the framework each needs here.
_FRAMEWORKS = {"torch": "torch", "tensorflow": "tensorflow", "keras": "keras", "mxnet": "mxnet"}


def check_extension(ext_name: str, ext_env_var: str = "", pkg_path: str = "", *args: Any) -> None:
    """Raises ImportError when the binding ``ext_name`` (``horovod.torch``, ``collective.tensorflow``...)
    cannot work here: the native core or the framework it binds is missing. There is one core for every
    framework here, so ``ext_env_var`` (Horovod's build switch) is never the remedy."""
    framework = _framework_of(ext_name)
    for module in ("collective._native", framework):
        if module is not None and importlib.util.find_spec(module) is None:
            raise ImportError(f"{ext_name} needs {module}, which is not installed "
                              f"({'pip install ' + module if module == framework else 'reinstall spark-hvd'})")


def gpu_available(ext_base_name: str, verbose: bool = False) -> bool:
    """Whether the framework ``ext_base_name`` ("torch", "tensorflow", "mxnet") sees a GPU here."""
    framework = _framework_of(ext_base_name)
    available = False
    if framework == "torch" and importlib.util.find_spec("torch") is not None:
        import torch

        available = bool(torch.cuda.is_available())
    elif framework in ("tensorflow", "keras") and importlib.util.find_spec("tensorflow") is not None:
        import tensorflow as tf

        available = bool(tf.config.list_physical_devices("GPU"))
    if verbose:
        print(f"{ext_base_name}: GPU {'available' if available else 'not available'}")
    return available


@contextlib.contextmanager
def env(**variables: Any) -> Iterator[None]:
    """Sets environment variables for the ``with`` block (a value of None unsets one), then puts back
    what was there: Horovod's way of passing HOROVOD_* settings to an ``init()`` inside the block."""
    saved = {name: os.environ.get(name) for name in variables}
    try:
        for name, value in variables.items():
            _set_or_unset(name, None if value is None else str(value))
        yield
    finally:
        for name, value in saved.items():
            _set_or_unset(name, value)


def split_list(items: Sequence[T], parts: int) -> list[Sequence[T]]:
    """``items`` cut into ``parts`` consecutive slices whose lengths differ by at most one (longer first)."""
    if parts < 1:
        raise ValueError(f"split_list needs at least one part, got {parts}")
    base, extra = divmod(len(items), parts)
    slices, start = [], 0
    for index in range(parts):
        end = start + base + (1 if index < extra else 0)
        slices.append(items[start:end])
        start = end
    return slices


def is_version_greater_equal_than(ver: str, target: str) -> bool:
    """Whether version ``ver`` is at least ``target``, release numbers compared as numbers ("2.13.0+cpu" and
    "2.13.0rc1" count as 2.13.0). A version without a leading number is a ValueError naming it."""
    return _release(ver) >= _release(target)


def _release(version: str) -> tuple[int, ...]:
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    if match is None:
        raise ValueError(f"not a version number: {version!r}")
    numbers = [int(part) for part in match.group(1).split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()  # 2.13 == 2.13.0
    return tuple(numbers)


def _framework_of(name: str) -> str | None:
    last = name.rsplit(".", 1)[-1]
    return _FRAMEWORKS.get(last)


def _set_or_unset(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


__all__ = ["ccl_built", "check_extension", "cuda_built", "ddl_built", "env", "gloo_built", "gpu_available",
           "is_version_greater_equal_than", "mpi_built", "nccl_built", "rocm_built", "split_list", "sycl_built"]
