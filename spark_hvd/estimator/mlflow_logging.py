"""A fit's MLflow logging, on the driver, when the caller has an active MLflow run: params when the ranks
launch, each epoch's metrics as rank 0 reports them (step = epoch), and the fitted model as an MLflow model
(see mlflow_model.py) at the end. A fit that fails after launch ends its run FAILED, with the metrics so far.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import warnings
from typing import Any

# Params worth seeing in the MLflow UI; objects (model, optimizer, store) are logged by type name.
_LOGGED_PARAMS = ("num_proc", "backend", "batch_size", "val_batch_size", "epochs", "train_steps_per_epoch",
                  "validation_steps_per_epoch", "shuffle", "random_seed", "run_id", "backward_passes_per_step",
                  "learning_rate_scaling", "reader", "feature_cols", "label_cols", "sample_weight_col",
                  "validation", "model", "optimizer", "loss")
# MLflow truncates nothing for us: longer tags are refused.
_MAX_TAG_CHARS = 5000
MODEL_NAME = "model"


def active_mlflow_run() -> Any:
    # A caller with an active run has imported mlflow already; importing it here would cost
    # seconds on every fit of those who do not use it.
    mlflow = sys.modules.get("mlflow")
    return None if mlflow is None else mlflow.active_run()


class MlflowFitLog:
    """One fit's logging into the run that was active when it started."""

    def __init__(self, run_id: str, tracking_uri: str) -> None:
        from mlflow.tracking import MlflowClient

        self.run_id = run_id
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
        import mlflow

        try:
            mlflow.log_params({k: json.dumps(v) if isinstance(v, list) else v for k, v in params.items()})
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
            return Model.log(artifact_path=None, name=MODEL_NAME, flavor=mlflow_model, spark_hvd_model=model,
                             signature=mlflow_model.model_signature(model),
                             pip_requirements=[*ours, *_installed("pandas", "pyarrow", "cloudpickle", "numpy")])
        except Exception as error:  # noqa: BLE001 - the fit succeeded: the caller keeps its model
            warnings.warn(f"MLflow: the fitted model was not logged to run {self.run_id}: "
                          f"{type(error).__name__}: {error}", RuntimeWarning, stacklevel=2)
            return None

    def fail(self, error: BaseException) -> None:
        """Ends the run FAILED, naming the error, keeping the epochs already logged."""
        import mlflow

        message = f"{type(error).__name__}: {error}"
        try:
            self._client.set_tag(self.run_id, "spark_hvd.error", message[:_MAX_TAG_CHARS])
        finally:
            active = mlflow.active_run()
            if active is not None and active.info.run_id == self.run_id:
                mlflow.end_run(status="FAILED")
            else:
                self._client.set_terminated(self.run_id, status="FAILED")


def start_mlflow_fit_log(estimator: Any, num_proc: int) -> MlflowFitLog | None:
    """The fit's logging when an MLflow run is active (its params logged), else None."""
    run = active_mlflow_run()
    if run is None:
        return None
    import mlflow

    log = MlflowFitLog(run.info.run_id, mlflow.get_tracking_uri())
    log.log_params(estimator, num_proc)
    return log


def _installed(*names: str) -> list[str]:
    from importlib import metadata

    pins = []
    for name in names:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pins.append(name)
    return pins
