"""Logs a finished fit to MLflow from the driver, when MLflow is installed and a run is active."""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

# Params worth seeing in the MLflow UI; objects (model, optimizer, store) are logged by type name.
_LOGGED_PARAMS = ("num_proc", "backend", "batch_size", "val_batch_size", "epochs", "train_steps_per_epoch",
                  "validation_steps_per_epoch", "shuffle", "random_seed", "run_id", "backward_passes_per_step",
                  "learning_rate_scaling", "reader", "feature_cols", "label_cols", "sample_weight_col",
                  "validation", "model", "optimizer", "loss")


def active_mlflow_run() -> Any:
    # A caller with an active run has imported mlflow already; importing it here would cost
    # seconds on every fit of those who do not use it.
    mlflow = sys.modules.get("mlflow")
    return None if mlflow is None else mlflow.active_run()


def log_fit_to_mlflow(estimator: Any, model: Any) -> bool:
    """Params, metrics per epoch (step = epoch) and the saved model as artifacts. False when skipped."""
    if active_mlflow_run() is None:
        return False
    import mlflow

    params = {}
    for name in _LOGGED_PARAMS:
        value = estimator.getOrDefault(getattr(estimator, name))
        params[name] = value if isinstance(value, (int, float, str, bool, type(None), list)) else type(value).__name__
    mlflow.log_params({k: json.dumps(v) if isinstance(v, list) else v for k, v in params.items()})
    for entry in model.getEpochMetrics():
        metrics = {k: float(v) for k, v in entry.items() if k != "epoch"}
        mlflow.log_metrics(metrics, step=int(entry["epoch"]))
    with tempfile.TemporaryDirectory(prefix="spark-hvd-mlflow-") as directory:
        model.save(f"{directory}/model")
        mlflow.log_artifacts(f"{directory}/model", artifact_path="model")
    return True
