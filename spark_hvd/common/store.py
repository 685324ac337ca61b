"""``horovod.spark.common.store`` under its new name: ``from spark_hvd.common.store import Store``.

Horovod's store classes are constructors here: each returns a ``spark_hvd.store.Store`` for its
prefix (one Store class serves every filesystem through fsspec). Their keywords are Horovod's (``save_runs``,
``runs_path``, ``train_path``...) or the filesystem's; any other is an error (see ``Store.create``).
"""

from __future__ import annotations

from typing import Any

from spark_hvd.store import Store, StoreError


def LocalStore(prefix_path: str, **storage_options: Any) -> Store:  # noqa: N802 - Horovod's class name
    """A Store on a local (or shared, mounted) path."""
    return Store.create(prefix_path, **storage_options)


def HDFSStore(prefix_path: str, driver: str = "libhdfs", **storage_options: Any) -> Store:  # noqa: N802
    """A Store on ``hdfs://`` (a bare path gets the default namenode). ``host``, ``port``, ``user``,
    ``kerb_ticket`` and ``extra_conf`` reach pyarrow's HDFS client; ``driver`` is accepted, as Horovod's HDFSStore
    ignores it too on pyarrow 0.17 and later (libhdfs is the only driver)."""
    prefix = prefix_path if "://" in prefix_path else f"hdfs://{prefix_path}"
    return Store.create(prefix, **storage_options)


def DBFSLocalStore(prefix_path: str, **storage_options: Any) -> Store:  # noqa: N802 - Horovod's class name
    """A Store on Databricks' DBFS through its ``/dbfs`` mount (``dbfs:/x`` or ``/dbfs/x``)."""
    return Store.create(prefix_path, **storage_options)


__all__ = ["DBFSLocalStore", "HDFSStore", "LocalStore", "Store", "StoreError"]
