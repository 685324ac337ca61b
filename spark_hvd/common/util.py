"""``horovod.spark.common.util`` under its new name: ``prepare_data`` for ``fit_on_parquet`` (driver side).

    with prepare_data(num_proc, store, df, label_columns=["y"], feature_columns=["x"]) as dataset_idx:
        model = estimator.fit_on_parquet(dataset_idx=dataset_idx)
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

from spark_hvd.data.input_checks import check_schema
from spark_hvd.data.materialize import materialize_checked
from spark_hvd.data.prepared import forget_prepared, remember_prepared
from spark_hvd.errors import InputError

# The seed of a validation fraction's split when the estimator's random_seed is None, so a fit of the
# same DataFrame finds this materialisation again.
DEFAULT_SPLIT_SEED = 0


@contextlib.contextmanager
def prepare_data(num_processes: int, store: Any, df: Any, label_columns: Sequence[str] | None = None,
                 feature_columns: Sequence[str] | None = None, validation: float | str | None = None,
                 sample_weight_col: str | None = None, compress_sparse: bool = False,
                 partitions_per_process: int = 10, verbose: int = 0) -> Iterator[str]:
    """Materialises ``df``'s columns as Parquet under ``store``; yields the dataset_idx that
    ``fit_on_parquet`` takes. feature_columns default to every column but the labels (as in Horovod).
    ``compress_sparse`` and ``partitions_per_process`` are accepted for Horovod's sake (vectors are
    stored dense; row groups are sized for the readers)."""
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
        raise InputError(f"prepare_data: num_processes must be a positive int, got {num_processes!r}")
    if not label_columns:
        raise InputError("prepare_data: label_columns cannot be None or empty")
    labels = [label_columns] if isinstance(label_columns, str) else list(label_columns)
    features = ([c for c in df.columns if c not in set(labels)] if feature_columns is None
                else [feature_columns] if isinstance(feature_columns, str) else list(feature_columns))
    plan = check_schema(df, features, labels, sample_weight_col, validation)
    data = materialize_checked(df, store, plan, DEFAULT_SPLIT_SEED, num_processes)
    if verbose:
        print(f"prepare_data: {data.train_rows} training and {data.val_rows} validation rows under "
              f"{store.get_intermediate_path(data.key)}")
    remember_prepared(data)
    try:
        yield data.key
    finally:
        forget_prepared(data)


__all__ = ["prepare_data"]
