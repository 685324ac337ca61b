"""Test modules pickled by value for a while, so that ranks and executors need not import the tests."""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any, Iterator

import cloudpickle


@contextlib.contextmanager
def pickled_by_value(*modules: ModuleType, pickler: Any = cloudpickle) -> Iterator[None]:
    """``pickler``: cloudpickle, which pickles what spark_hvd ships itself (a run's payload), or pyspark's own
    copy of it (``pyspark.cloudpickle``, with a registry of its own), which pickles the functions of Spark's
    tasks (a mapInArrow function and what it holds)."""
    for module in modules:
        pickler.register_pickle_by_value(module)
    try:
        yield
    finally:
        for module in modules:
            pickler.unregister_pickle_by_value(module)
