"""Test modules pickled by value for a while, so that ranks and executors need not import the tests."""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Iterator

import cloudpickle


@contextlib.contextmanager
def pickled_by_value(*modules: ModuleType) -> Iterator[None]:
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        for module in modules:
            cloudpickle.unregister_pickle_by_value(module)
