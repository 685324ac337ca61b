"""Driver: which run directory a fit trains in, so that a run's checkpoints are only resumed by the same fit.

``<runs>/<run_id>/fit.json`` records the fit a run belongs to (fit_identity.py), written by the driver before
the ranks start. A fit given ``run_id`` R:

- trains in R when R is new (no record, no checkpoint): it claims R;
- resumes R when R's record is this fit, asked for as many epochs or more: Horovod's rule (a run_id resumes
  from its last checkpoint), kept for the fit that wrote it, and how a fit trains on for more epochs;
- else trains under ``R.<its digest>``, from that run's last checkpoint when it is there (the same fit,
  fitted before), else from the start, with a RunIdReuseWarning: R belongs to another fit, and its run
  stays as it is (also before its first checkpoint: that fit may be training in another driver). Tuning
  (param maps, folds) with a fixed run_id so trains every fit on its own;
- a fit whose run another fit of this driver is training now trains from the start under ``R.<random>``,
  with the warning, so that no two fits ever write one run at once.

A warning rather than an error: Horovod scripts set a fixed run_id and hand the estimator to Spark ML's tuning,
which fits it many times; an error would stop them, and resuming would return another fit's model.
"""

from __future__ import annotations

import json
import secrets
import threading
import warnings
from dataclasses import dataclass
from typing import Any

from spark_hvd.errors import RunIdReuseWarning
from spark_hvd.estimator.fit_identity import FitIdentity

RECORD_NAME = "fit.json"

_LOCK = threading.Lock()
_TRAINING: set[str] = set()        # the run paths the fits of this driver are training in now


@dataclass(frozen=True)
class RunClaim:
    """The run a fit trains in (``run_id``), held until ``release``."""

    store: Any
    run_id: str
    notice: str | None = None      # why it is not the run_id asked for

    def release(self) -> None:
        with _LOCK:
            _TRAINING.discard(self.store.get_run_path(self.run_id))


def claim_run(store: Any, run_id: str, identity: FitIdentity) -> RunClaim:
    """The run this fit trains in, given the run_id asked for; its record is written, and the run held."""
    with _LOCK:
        # Chosen and recorded under the lock, so that a fit of this driver starting meanwhile sees the record.
        chosen, notice = _choose(store, run_id, identity)
        store.write_bytes(_record_path(store, chosen), identity.record())
        _TRAINING.add(store.get_run_path(chosen))
    if notice is not None:
        warnings.warn(notice, RunIdReuseWarning, stacklevel=2)
    return RunClaim(store, chosen, notice)


def _choose(store: Any, run_id: str, identity: FitIdentity) -> tuple[str, str | None]:
    record = _record(store, run_id)
    ours = (record is None and not store.list(store.get_checkpoint_path(run_id))) or (
        record is not None and identity.continues(record))
    if ours and not _training(store, run_id):
        return run_id, None
    if ours:
        other = _random_run(run_id)
        return other, (f"run_id {run_id!r} is in use by another fit of the same model and data running now; this "
                       f"fit trains from the start under run_id {other!r}")
    own = f"{run_id}.{identity.digest}"
    why = identity.differences(record) if record is not None else "no record says which fit wrote them"
    if _training(store, own):
        own = _random_run(run_id)
    resumes = "resuming its last checkpoint there" if _resumable(store, own, identity) else "from the start"
    return own, (f"run_id {run_id!r} belongs to another fit ({why}), whose run stays as it is; this fit trains "
                 f"under run_id {own!r} instead, {resumes}. Horovod would have resumed the other fit's checkpoint; "
                 "give each fit its own run_id, or none (Spark ML's tuning fits an estimator many times)")


def _resumable(store: Any, run_id: str, identity: FitIdentity) -> bool:
    record = _record(store, run_id)
    return record is not None and identity.continues(record) and bool(store.list(store.get_checkpoint_path(run_id)))


def _training(store: Any, run_id: str) -> bool:
    return store.get_run_path(run_id) in _TRAINING


def _random_run(run_id: str) -> str:
    return f"{run_id}.{secrets.token_hex(4)}"


def _record(store: Any, run_id: str) -> dict[str, Any] | None:
    path = _record_path(store, run_id)
    if not store.exists(path):
        return None
    try:
        return json.loads(store.read_bytes(path))
    except ValueError:
        return {}                  # unreadable: no fit's


def _record_path(store: Any, run_id: str) -> str:
    return f"{store.get_run_path(run_id).rstrip('/')}/{RECORD_NAME}"
