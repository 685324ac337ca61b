"""Horovod's ``horovod.spark.common`` import paths, so ported code only changes its package prefix."""

_SUBMODULES = ("store", "backend", "util")


def __getattr__(name: str):  # noqa: ANN202 - module-level lazy attribute (PEP 562)
    # `horovod.spark.common.store.Store(...)` in a script that imported only `horovod.spark`.
    if name not in _SUBMODULES:
        raise AttributeError(f"module 'spark_hvd.common' has no attribute {name!r}")
    import importlib

    return importlib.import_module(f"{__name__}.{name}")
