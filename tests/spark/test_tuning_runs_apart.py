"""Fits a tuner runs side by side stay apart (issue #33): each fit's progress lines carry its own param map or
trial and only its own epochs, and under an active MLflow run each fit logs to a run of its own, nested under
the caller's, with its own params, epochs and model. Spark ML's TrainValidationSplit at parallelism 2 and
Optuna's n_jobs=2, on local[2] with one-rank fits."""

from __future__ import annotations

import io
import re
import sys

import pytest

from concurrent_driver import slope_estimator, slope_rows
from test_mlflow_logging import tracking  # noqa: F401  (the sqlite store fixture)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

mlflow = pytest.importorskip("mlflow")
BATCH_SIZES = [4, 8]
EPOCHS = 2


@pytest.fixture(scope="module")
def slope_df(local_spark):
    return local_spark.createDataFrame(slope_rows(64), "x double, y double").repartition(2)


def tune_in_parallel(estimator, df):
    from pyspark.ml.evaluation import RegressionEvaluator
    from pyspark.ml.tuning import ParamGridBuilder, TrainValidationSplit

    evaluator = RegressionEvaluator(predictionCol="y__output", labelCol="y", metricName="rmse")
    grid = ParamGridBuilder().addGrid(estimator.batch_size, BATCH_SIZES).build()
    return TrainValidationSplit(estimator=estimator, estimatorParamMaps=grid, evaluator=evaluator, trainRatio=0.75,
                                parallelism=2, seed=3, collectSubModels=True).fit(df)


# A cursor movement or erase: with two fits' bars on screen, tqdm moves up a line to print above them.
ANSI_CONTROL = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def epoch_lines(output: str) -> dict[str, list[str]]:
    """label -> its epoch lines' metric text, in order; "" for lines without a label. A line's text is read
    after each carriage return and without cursor movements, as a terminal shows it."""
    found: dict[str, list[str]] = {}
    for line in output.splitlines():
        for text in line.split("\r"):
            match = re.match(r"^(?:\[(.+?)\] )?epoch (\d+)/\d+: (.*) \(\d", ANSI_CONTROL.sub("", text))
            if match:
                found.setdefault(match.group(1) or "", []).append(match.group(3))
    return found


def test_side_by_side_fits_keep_their_own_progress_lines_and_nested_mlflow_runs(slope_df, store, tracking,  # noqa: F811
                                                                                monkeypatch) -> None:
    console = io.StringIO()
    monkeypatch.setattr(sys, "stderr", console)
    with mlflow.start_run() as parent:
        tuned = tune_in_parallel(slope_estimator(store, epochs=EPOCHS, validation=0.25, verbose=1), slope_df)
    output = console.getvalue()

    # The console: each fit's epoch lines carry its param map and show its own rank 0's losses.
    lines = epoch_lines(output)
    # The tuner's last fit, of the best param map on all the rows, runs alone: its lines need no label.
    assert sorted(lines) == ["", *(f"batch_size={size}" for size in BATCH_SIZES)], output[-3000:]
    assert len(lines[""]) == EPOCHS
    for size, model in zip(BATCH_SIZES, tuned.subModels):
        history = model.getEpochMetrics()
        assert len(history) == EPOCHS
        shown = [re.search(r"loss=([^,]+)", text).group(1) for text in lines[f"batch_size={size}"]]
        assert shown == [f"{epoch['loss']:.4g}" for epoch in history], (size, shown, history)
    status = [line for line in output.splitlines() if "spark-hvd" in line and "launched" in line]
    labelled = [line for line in status if "spark-hvd [batch_size=" in line]
    assert len(labelled) == len(BATCH_SIZES) and len(status) == len(BATCH_SIZES) + 1, status

    # MLflow: a run per side-by-side fit, nested under the caller's, with its own params, epochs and model.
    parent_id = parent.info.run_id
    children = tracking.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'")
    by_size = {int(run.data.params["batch_size"]): run for run in children}
    assert sorted(by_size) == BATCH_SIZES and len(children) == len(BATCH_SIZES)
    for size, model in zip(BATCH_SIZES, tuned.subModels):
        run = by_size[size]
        assert run.info.status == "FINISHED"
        assert run.info.run_name == f"batch_size={size}"
        history = [m.value for m in sorted(tracking.get_metric_history(run.info.run_id, "val_loss"),
                                           key=lambda m: m.step)]
        assert history == pytest.approx([epoch["val_loss"] for epoch in model.getEpochMetrics()], rel=1e-6)
        logged = [m for m in tracking.search_logged_models([parent.info.experiment_id])
                  if m.source_run_id == run.info.run_id]
        assert len(logged) == 1
    # The caller's run holds the tuner's last fit alone (the best param map, on all the rows): its epochs and
    # params, none of the side-by-side fits'.
    best_size = BATCH_SIZES[min(range(len(BATCH_SIZES)), key=lambda i: tuned.validationMetrics[i])]
    parent_history = sorted(tracking.get_metric_history(parent_id, "val_loss"), key=lambda m: m.step)
    assert [m.value for m in parent_history] == pytest.approx(
        [epoch["val_loss"] for epoch in tuned.bestModel.getEpochMetrics()], rel=1e-6)
    assert tracking.get_run(parent_id).data.params["batch_size"] == str(best_size)


def test_optuna_trials_side_by_side_log_a_nested_run_each(slope_df, store, tracking) -> None:  # noqa: F811
    optuna = pytest.importorskip("optuna")
    from spark_hvd.tuning import fit_trial, last_metric

    def objective(trial):
        size = trial.suggest_categorical("batch_size", BATCH_SIZES)
        estimator = slope_estimator(store, epochs=2, validation=0.25)
        model = fit_trial(trial, estimator, slope_df, params={estimator.batch_size: size},
                          mlflow_parent_run_id=parent_id)
        return last_metric(model, "val_loss")

    with mlflow.start_run() as parent:
        parent_id = parent.info.run_id
        study = optuna.create_study(sampler=optuna.samplers.GridSampler({"batch_size": BATCH_SIZES}))
        study.optimize(objective, n_trials=2, n_jobs=2)
    children = tracking.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'")
    assert sorted(run.data.tags["optuna.trial_number"] for run in children) == ["0", "1"]
    for run in children:
        trial = study.trials[int(run.data.tags["optuna.trial_number"])]
        assert run.info.status == "FINISHED" and run.info.run_name == f"trial {trial.number}"
        assert run.data.params["batch_size"] == str(trial.params["batch_size"])
        assert run.data.metrics["val_loss"] == pytest.approx(trial.value, rel=1e-6)

