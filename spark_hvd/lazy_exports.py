"""Driver and rank child: a package's public names loaded on first use (PEP 562).

The framework packages (``spark_hvd.torch``, ``.keras``, ``.lightning``) export an estimator and a model that
import pyspark.ml, while a rank imports the same package's trainer and must not load Spark's modules.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: each name in ``exports`` from its module, imported when first asked."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
