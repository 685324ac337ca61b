"""Tuning distributed fits on a standalone cluster with four slots: Spark ML's TrainValidationSplit over three
param maps at parallelism 3 (three fits of two ranks, one waiting for its slots) gives sequential tuning's
results; an Optuna study (spark_hvd.tuning.fit_trial) runs two trials of two ranks at a time, a MedianPruner
stops the clearly worse settings, and nothing is left running afterwards (barrier stages, launcher threads)."""

from __future__ import annotations

import os
import threading

import pytest

optuna = pytest.importorskip("optuna")

from estimator_data import blobs  # noqa: E402
from estimator_models import class_loss, classifier  # noqa: E402
from spark_hvd.errors import InputError  # noqa: E402
from standalone_cluster import StandaloneCluster, WorkerSpec  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

# Learning rates in the order the study tries them: the small ones train far worse in a few epochs.
_LEARNING_RATES = [0.05, 0.0001, 0.1, 0.0002, 0.03, 0.0001]


@pytest.fixture(scope="module")
def four_slots(spark_environment, spark_sessions, tmp_path_factory):
    """Two workers of two cores each: room for two fits of two ranks at once."""
    workers = [WorkerSpec(cores=2, memory="2g"), WorkerSpec(cores=2, memory="2g")]
    with StandaloneCluster(tmp_path_factory.mktemp("tuning"), workers, os.environ) as cluster:
        conf = {**spark_sessions.cluster_conf(4), "spark.executor.cores": "2", "spark.executor.memory": "1g"}
        with spark_sessions.session(cluster.master_url, conf) as spark:
            yield spark


def _objective(df, store):
    import torch

    from spark_hvd.torch import TorchEstimator
    from spark_hvd.tuning import fit_trial, last_metric

    def objective(trial) -> float:
        lr = trial.suggest_categorical("lr", sorted(set(_LEARNING_RATES)))
        model = classifier(4, 3, seed=1)
        estimator = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=lr),
                                   loss=class_loss, feature_cols=["features"], label_cols=["label"],
                                   validation=0.25, batch_size=16, epochs=5, random_seed=3, store=store, verbose=0)
        return last_metric(fit_trial(trial, estimator, df, monitor="val_loss"), "val_loss")

    return objective


def test_a_study_runs_two_distributed_trials_at_a_time_and_prunes_the_worse(four_slots, tmp_path) -> None:
    from spark_hvd import Store

    df = blobs(four_slots, 600, partitions=4).cache()
    store = Store.create(str(tmp_path / "store"))
    study = optuna.create_study(direction="minimize",
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0))
    for lr in _LEARNING_RATES:
        study.enqueue_trial({"lr": lr})
    study.optimize(_objective(df, store), n_trials=len(_LEARNING_RATES), n_jobs=2)

    states = [trial.state for trial in study.trials]
    assert states.count(optuna.trial.TrialState.PRUNED) >= 1, states
    assert states.count(optuna.trial.TrialState.FAIL) == 0, states
    assert study.best_trial.params["lr"] >= 0.03, study.best_trial.params
    # Each trial was its own fit, under a run of its own.
    run_ids = [trial.user_attrs.get("run_id") for trial in study.trials if "run_id" in trial.user_attrs]
    assert len(set(run_ids)) == len(run_ids)
    # Nothing of the study is left running: no Spark job or stage, no launcher thread.
    tracker = four_slots.sparkContext.statusTracker()
    assert tracker.getActiveJobsIds() == [] and tracker.getActiveStageIds() == []
    assert [t.name for t in threading.enumerate() if t.name.startswith("spark-hvd")] == []


def test_train_validation_split_at_parallelism_three_matches_sequential_tuning(four_slots, tmp_path) -> None:
    import torch
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.tuning import ParamGridBuilder, TrainValidationSplit

    from spark_hvd import Store
    from spark_hvd.torch import TorchEstimator

    df = blobs(four_slots, 400, partitions=4).cache()
    model = classifier(4, 3, seed=2)
    estimator = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               loss=class_loss, feature_cols=["features"], label_cols=["label"], batch_size=16,
                               random_seed=1, store=Store.create(str(tmp_path / "store")), verbose=0,
                               classification="logits")
    grid = ParamGridBuilder().addGrid(estimator.epochs, [1, 2, 4]).build()
    evaluator = MulticlassClassificationEvaluator(labelCol="label", metricName="logLoss")

    def tuned(parallelism: int) -> list[float]:
        return TrainValidationSplit(estimator=estimator, estimatorParamMaps=grid, evaluator=evaluator, seed=5,
                                    parallelism=parallelism).fit(df).validationMetrics

    sequential, parallel = tuned(1), tuned(3)
    assert parallel == pytest.approx(sequential, rel=1e-6)
    assert sequential[2] < sequential[0]           # more epochs fit better: the tuning had something to find


def test_a_monitor_the_fit_does_not_report_is_named(four_slots, tmp_path) -> None:
    import torch

    from spark_hvd import Store
    from spark_hvd.torch import TorchEstimator
    from spark_hvd.tuning import fit_trial

    model = classifier(4, 3)
    estimator = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               loss=class_loss, feature_cols=["features"], label_cols=["label"], epochs=1,
                               store=Store.create(str(tmp_path / "store")), verbose=0)
    study = optuna.create_study()
    with pytest.raises(InputError, match=r"monitor='val_loss' is not among the epoch's metrics \['loss'\]"):
        fit_trial(study.ask(), estimator, blobs(four_slots, 200), monitor="val_loss")
