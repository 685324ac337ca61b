"""Driver: what a fit made on behalf of a tuner knows of its place in the search (Spark ML's ``fitMultiple``,
an Optuna trial): the label its progress lines carry, and the MLflow run its own run nests under.

Kept per thread, like the epoch listeners: tuners fit side by side from pool threads, and each fit runs
wholly in the thread that called it, so a fit reads its own context and never a sibling's.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

_local = threading.local()
# A label is a line prefix: long param values (a model, a list) are cut, not wrapped.
_MAX_VALUE_CHARS = 24


@dataclass(frozen=True)
class MlflowParent:
    """The MLflow run the tuner's caller had active: each fit logs to a run of its own nested under it."""

    run_id: str
    experiment_id: str
    tracking_uri: str


@dataclass(frozen=True)
class FitContext:
    label: str                                   # e.g. "batch_size=8, lr=0.1" or "trial 3"
    mlflow_parent: MlflowParent | None = None
    tags: Mapping[str, str] = field(default_factory=dict)   # on the fit's own MLflow run


def current_fit_context() -> FitContext | None:
    """The context of the fit this thread is running for a tuner, or None for a plain fit."""
    return getattr(_local, "context", None)


@contextlib.contextmanager
def fitting_as(context: FitContext) -> Iterator[None]:
    """Within the block, fits this thread runs are ``context``'s (nested blocks: the innermost wins)."""
    outer = current_fit_context()
    _local.context = context
    try:
        yield
    finally:
        _local.context = outer


def active_mlflow_run() -> Any:
    """This thread's active MLflow run, or None. A caller with an active run has imported mlflow already;
    importing it here would cost seconds on every fit of those who do not use it."""
    mlflow = sys.modules.get("mlflow")
    return None if mlflow is None else mlflow.active_run()


def active_mlflow_parent() -> MlflowParent | None:
    """The MLflow run active in this thread, as a parent for the fits a tuner makes in other threads."""
    run = active_mlflow_run()
    if run is None:
        return None
    return MlflowParent(run.info.run_id, run.info.experiment_id, sys.modules["mlflow"].get_tracking_uri())


def mlflow_parent_by_id(run_id: str) -> MlflowParent:
    """A parent named by its run id (a thread without the run active, e.g. an Optuna ``n_jobs`` worker)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = mlflow.get_tracking_uri()
    return MlflowParent(run_id, MlflowClient(uri).get_run(run_id).info.experiment_id, uri)


def param_map_label(param_map: Mapping[Any, Any]) -> str:
    """"batch_size=8, lr=0.1": a Spark ML param map as a fit's label, in the params' name order."""
    parts = []
    for param, value in sorted(param_map.items(), key=lambda item: item[0].name):
        text = repr(value) if isinstance(value, (int, float, str, bool, type(None))) else type(value).__name__
        if len(text) > _MAX_VALUE_CHARS:
            text = text[:_MAX_VALUE_CHARS - 3] + "..."
        parts.append(f"{param.name}={text}")
    return ", ".join(parts) or "defaults"
