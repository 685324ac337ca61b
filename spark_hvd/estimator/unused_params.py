"""Horovod parameters that spark-hvd accepts but does not need: one warning each, naming why (driver side)."""

from __future__ import annotations

import warnings
from typing import Any

# param -> why it changes nothing here. Warned only when the user set it (not for defaults).
_WITHOUT_EFFECT = {
    "partitions_per_process": "spark-hvd writes row groups sized for the readers and gives each rank an even "
                              "share of the rows, whatever the DataFrame's partitions",
    "mp_start_method": "spark-hvd's readers start no worker processes",
    "compress_sparse_cols": "vectors are materialised dense; sparse compression is not implemented",
}
# Horovod's Petastorm pool kind: our readers read in the rank's own thread (Petastorm's 'dummy'), since
# Petastorm's thread pool was seen to drop whole epochs; the decode workers (train_reader_num_workers) are
# processes of our own.
_READER_POOL = ("reader_pool_type",)


def warn_unused_params(estimator: Any) -> None:
    """One warning per set parameter without effect: the shared ones, and the estimator class's own
    ``params_without_effect`` (name -> why)."""
    own = getattr(type(estimator), "params_without_effect", {})
    for name, why in {**_WITHOUT_EFFECT, **own}.items():
        param = getattr(estimator, name, None)
        if param is not None and estimator.isSet(param) and estimator.getOrDefault(param) not in (None, [], ()):
            _warn(f"{type(estimator).__name__}: {name} has no effect: {why}")
    for name in _READER_POOL:
        if estimator.isSet(getattr(estimator, name)):
            _warn(f"{type(estimator).__name__}: {name} has no effect: each rank reads its rows in its own "
                  "thread (Petastorm's thread pool was seen to return empty epochs, so reader='petastorm' uses "
                  "its 'dummy' pool); transformation_fn runs in train_reader_num_workers processes")


def _warn(message: str) -> None:
    # stacklevel 4: the user's fit() call, through Spark ML's fit and our _fit.
    warnings.warn(message, UserWarning, stacklevel=4)
