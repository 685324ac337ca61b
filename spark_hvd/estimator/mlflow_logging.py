"""A fit's MLflow logging, on the driver, when the caller has an active MLflow run: params when the ranks
launch, each epoch's metrics as rank 0 reports them (step = epoch), and the fitted model as an MLflow model
(see mlflow_model.py) at the end. A fit that fails after launch ends its run FAILED, with the metrics so far.

A fit a tuner makes (Spark ML's ``fitMultiple``, an Optuna trial; fit_context.py) logs instead to a run of its
own, nested under the caller's, which it starts and ends: fits side by side never share a run, and a pruned
trial's run ends KILLED.
"""

from __future__ import annotations

import json
import threading
import time
import warnings
from typing import Any

from spark_hvd.estimator.fit_context import FitContext, MlflowParent, active_mlflow_run, current_fit_context

# Params worth seeing in the MLflow UI; objects (model, optimizer, store) are logged by type name.
_LOGGED_PARAMS = ("num_proc", "backend", "batch_size", "val_batch_size", "epochs", "train_steps_per_epoch",
                  "validation_steps_per_epoch", "shuffle", "random_seed", "run_id", "backward_passes_per_step",
                  "learning_rate_scaling", "reader", "feature_cols", "label_cols", "sample_weight_col",
                  "validation", "model", "optimizer", "loss")
# MLflow truncates nothing for us: longer tags are refused.
_MAX_TAG_CHARS = 5000
MODEL_NAME = "model"


class MlflowFitLog:
    """One fit's logging into the run that was active when it started."""

    def __init__(self, run_id: str, tracking_uri: str, owned: bool = False) -> None:
        from mlflow.tracking import MlflowClient

        self.run_id = run_id
        self._owned = owned   # this fit started the run, so this fit ends it
        # Epoch events arrive on the launcher's thread, where the caller's active run is not visible:
        # an explicit client writes to the run by id.
        self._client = MlflowClient(tracking_uri)
        self._lock = threading.Lock()
        self._warned = False

    def log_params(self, estimator: Any, num_proc: int) -> None:
        params: dict[str, Any] = {}
        for name in _LOGGED_PARAMS:
            value = estimator.getOrDefault(getattr(estimator, name))
            params[name] = value if isinstance(value, (int, float, str, bool, type(None), list)) \
                else type(value).__name__
        params["num_proc"] = num_proc
        from mlflow.entities import Param

        try:
            self._client.log_batch(self.run_id, params=[Param(k, json.dumps(v) if isinstance(v, list) else str(v))
                                                        for k, v in params.items()])
        except Exception as error:  # noqa: BLE001 - e.g. a second fit in one run with other params
            warnings.warn(f"MLflow: the fit's params were not logged to run {self.run_id}: {error}",
                          RuntimeWarning, stacklevel=2)

    def log_epoch(self, epoch: int, metrics: dict[str, float]) -> None:
        """Called as each epoch's metrics arrive; a tracking server that fails costs a warning, not the fit."""
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        batch = [Metric(key, float(value), stamp, int(epoch)) for key, value in metrics.items()]
        try:
            with self._lock:
                self._client.log_batch(self.run_id, metrics=batch)
        except Exception as error:  # noqa: BLE001 - the fit goes on; the user is told once
            if not self._warned:
                self._warned = True
                warnings.warn(f"MLflow: could not log epoch {epoch}'s metrics to run {self.run_id}: {error}",
                              RuntimeWarning, stacklevel=2)

    def log_model(self, model: Any) -> Any:
        """The fitted model as an MLflow model named "model" in the run; returns MLflow's ModelInfo (None, with
        a warning, when MLflow refuses it)."""
        from importlib import metadata

        from mlflow.models import Model

        from spark_hvd.estimator import mlflow_model

        try:
            ours = [f"spark-hvd=={metadata.version('spark-hvd')}"]
        except metadata.PackageNotFoundError:
            ours = ["spark-hvd"]
        try:
            return Model.log(artifact_path=None, name=MODEL_NAME, run_id=self.run_id, flavor=mlflow_model,
                             spark_hvd_model=model,
                             signature=mlflow_model.model_signature(model),
                             pip_requirements=[*ours, *_installed("pandas", "pyarrow", "cloudpickle", "numpy")])
        except Exception as error:  # noqa: BLE001 - the fit succeeded: the caller keeps its model
            warnings.warn(f"MLflow: the fitted model was not logged to run {self.run_id}: "
                          f"{type(error).__name__}: {error}", RuntimeWarning, stacklevel=2)
            return None

    def finish(self) -> None:
        """Ends the run this fit started (a tuner's fit); the caller's own run stays the caller's to end."""
        if self._owned:
            self._client.set_terminated(self.run_id, status="FINISHED")

    def fail(self, error: BaseException) -> None:
        """Ends the run FAILED, naming the error, keeping the epochs already logged; a pruned Optuna trial's
        run ends KILLED."""
        import mlflow

        pruned = type(error).__name__ == "TrialPruned"
        message = f"{type(error).__name__}: {error}"
        status = "KILLED" if pruned else "FAILED"
        try:
            self._client.set_tag(self.run_id, "spark_hvd.pruned" if pruned else "spark_hvd.error",
                                 message[:_MAX_TAG_CHARS])
        finally:
            active = mlflow.active_run()
            if active is not None and active.info.run_id == self.run_id:
                mlflow.end_run(status=status)
            else:
                self._client.set_terminated(self.run_id, status=status)


def start_mlflow_fit_log(estimator: Any, num_proc: int) -> MlflowFitLog | None:
    """The fit's logging (its params logged): to a new nested run when a tuner made the fit under an MLflow
    run, to the active run otherwise; None when there is neither."""
    context = current_fit_context()
    if context is not None and context.mlflow_parent is not None:
        log = _nested_run(context.mlflow_parent, context)
    else:
        run = active_mlflow_run()
        if run is None:
            return None
        import mlflow

        log = MlflowFitLog(run.info.run_id, mlflow.get_tracking_uri())
    log.log_params(estimator, num_proc)
    return log


def _nested_run(parent: MlflowParent, context: FitContext) -> MlflowFitLog:
    from mlflow.tracking import MlflowClient

    tags = {"mlflow.parentRunId": parent.run_id, **context.tags}
    run = MlflowClient(parent.tracking_uri).create_run(parent.experiment_id, run_name=context.label, tags=tags)
    return MlflowFitLog(run.info.run_id, parent.tracking_uri, owned=True)


def _installed(*names: str) -> list[str]:
    from importlib import metadata

    pins = []
    for name in names:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pins.append(name)
    return pins
