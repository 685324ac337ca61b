"""Materialisations prepared ahead of a fit (``prepare_data`` / ``fit_on_parquet``), found by key (driver side)."""

from __future__ import annotations

import posixpath

from spark_hvd.data.materialized import METADATA_NAME, Materialized
from spark_hvd.errors import InputError
from spark_hvd.store import Store

# Store prefix -> key of the last materialisation prepared there, so fit_on_parquet() without a
# dataset_idx trains on it, as Horovod's does.
_LAST_PREPARED: dict[str, str] = {}


def remember_prepared(data: Materialized) -> None:
    _LAST_PREPARED[data.store.prefix_path] = data.key


def forget_prepared(data: Materialized) -> None:
    if _LAST_PREPARED.get(data.store.prefix_path) == data.key:
        del _LAST_PREPARED[data.store.prefix_path]


def load_prepared(store: Store, dataset_idx: str | None) -> Materialized:
    """The materialisation ``dataset_idx`` names under ``store`` (default: the last one prepared there)."""
    key = dataset_idx if dataset_idx is not None else _LAST_PREPARED.get(store.prefix_path)
    if key is None:
        raise InputError(f"fit_on_parquet: no data was prepared under {store!r}; call "
                         "spark_hvd.common.util.prepare_data(...) first, or pass its dataset_idx")
    path = posixpath.join(store.get_intermediate_path(str(key)), METADATA_NAME)
    if not store.exists(path):
        raise InputError(f"fit_on_parquet: dataset_idx {key!r} names no complete materialisation under "
                         f"{store!r} (no {path})")
    return Materialized.from_json(store, store.read_bytes(path))
