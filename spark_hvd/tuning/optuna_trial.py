"""Driver: one distributed fit as one Optuna trial, reporting each epoch and stopping when the pruner says so.

``study.optimize(objective, n_jobs=k)`` calls the objective from k threads: each trial's fit is a barrier stage
of its own, and hears only its own epochs (estimator/epoch_listeners.py). A pruned fit stops at the epoch its
report was made: the listener raises ``optuna.TrialPruned``, which cancels the fit's barrier stage at once
(its ranks stop in the next epoch, their slots free for the next trial) and comes out of ``fit``, so Optuna
marks the trial pruned.
"""

from __future__ import annotations

import math
from typing import Any

from spark_hvd.errors import InputError
from spark_hvd.estimator.epoch_listeners import listening
from spark_hvd.estimator.fit_context import FitContext, active_mlflow_parent, fitting_as, mlflow_parent_by_id


def fit_trial(trial: Any, estimator: Any, df: Any, monitor: str = "val_loss", params: dict | None = None,
              mlflow_parent_run_id: str | None = None) -> Any:
    """Fits ``estimator`` (with ``params``, a Spark ML param map, when given) on ``df`` as the Optuna ``trial``:
    each epoch's ``monitor`` metric (a key of ``model.getEpochMetrics()``, e.g. ``val_loss``) goes to
    ``trial.report(value, epoch)``; when ``trial.should_prune()``, the fit stops and ``optuna.TrialPruned``
    is raised. Returns the fitted model; ``last_metric(model, monitor)`` is the usual objective value.

    The fit's progress lines carry ``trial N``. Under MLflow the trial's fit logs to a run of its own, nested
    under ``mlflow_parent_run_id`` or else under the run active in this thread (``n_jobs`` worker threads have
    none: pass the parent's id); its run ends KILLED when the trial is pruned."""
    import optuna

    def report(epoch: int, metrics: dict[str, float]) -> None:
        if monitor not in metrics:
            raise InputError(f"fit_trial: monitor={monitor!r} is not among the epoch's metrics {sorted(metrics)} "
                             "(a val_ metric needs validation= on the estimator)")
        value = float(metrics[monitor])
        trial.report(value, epoch)
        if trial.should_prune():
            raise optuna.TrialPruned(f"pruned after epoch {epoch + 1}: {monitor}={value:.6g}")

    parent = mlflow_parent_by_id(mlflow_parent_run_id) if mlflow_parent_run_id else active_mlflow_parent()
    study = getattr(trial, "study", None)
    tags = {"optuna.trial_number": str(trial.number), "optuna.study": getattr(study, "study_name", "")}
    context = FitContext(label=f"trial {trial.number}", mlflow_parent=parent, tags=tags)
    with listening(report), fitting_as(context):
        model = estimator.fit(df, params) if params else estimator.fit(df)
    trial.set_user_attr("run_id", model.getRunId())
    return model


def last_metric(model: Any, monitor: str = "val_loss") -> float:
    """The last epoch's ``monitor`` metric of a fitted model; InputError naming the metrics it has otherwise."""
    metrics = model.getEpochMetrics()
    if not metrics or monitor not in metrics[-1]:
        raise InputError(f"the model's last epoch has no {monitor!r}; it has {sorted(metrics[-1]) if metrics else []}")
    value = float(metrics[-1][monitor])
    if not math.isfinite(value):
        raise InputError(f"the model's last {monitor!r} is {value}")
    return value
