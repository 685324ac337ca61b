"""Tuning distributed fits: 8 Optuna trials of 2-rank TorchEstimator fits on a standalone cluster with 4 slots,
run sequentially, 2 at a time, and 2 at a time with a MedianPruner, in one run. Prints each one's wall time and
its ratio to the sequential study (target: 2 at a time <= 0.6x).

    python bench/tuning.py [--trials 8] [--epochs 6] [--rows 4000]

Half the learning rates are clearly worse (they barely train in the epochs given), so the pruner has
something to stop. The cluster is warmed by one untimed fit first (Python workers, spare rank processes).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "spark"))

from _local_spark import prepare_environment  # noqa: E402

_GOOD_AND_BAD_RATES = [0.05, 0.0001, 0.1, 0.0002, 0.03, 0.0001, 0.08, 0.0003]


def _frame(spark: Any, rows: int) -> Any:
    import numpy as np
    from pyspark.ml.linalg import Vectors

    rng = np.random.default_rng(0)
    centres = rng.normal(0, 3, size=(4, 8))
    labels = rng.integers(0, 4, size=rows)
    points = centres[labels] + rng.normal(0, 1.0, size=(rows, 8))
    data = [(Vectors.dense(p.tolist()), float(label)) for p, label in zip(points, labels)]
    return spark.createDataFrame(data, ["features", "label"]).repartition(4).cache()


def _class_loss(output: Any, label: Any) -> Any:
    import torch

    return torch.nn.functional.cross_entropy(output, label.long())


def _estimator(lr: float, epochs: int, store: Any) -> Any:
    import torch

    from spark_hvd.torch import TorchEstimator

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=lr),
                          loss=_class_loss, feature_cols=["features"], label_cols=["label"], validation=0.2,
                          batch_size=32, epochs=epochs, random_seed=0, store=store, verbose=0)


def _study(df: Any, store: Any, args: argparse.Namespace, jobs: int, prune: bool) -> tuple[float, int]:
    import optuna

    from spark_hvd.tuning import fit_trial, last_metric

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_categorical("lr", sorted(set(_GOOD_AND_BAD_RATES)))
        return last_metric(fit_trial(trial, _estimator(lr, args.epochs, store), df), "val_loss")

    pruner = optuna.pruners.MedianPruner(n_startup_trials=2) if prune else optuna.pruners.NopPruner()
    study = optuna.create_study(direction="minimize", pruner=pruner)
    for lr in _GOOD_AND_BAD_RATES[:args.trials]:
        study.enqueue_trial({"lr": lr})
    began = time.monotonic()
    study.optimize(objective, n_trials=args.trials, n_jobs=jobs)
    took = time.monotonic() - began
    return took, sum(trial.state == optuna.trial.TrialState.PRUNED for trial in study.trials)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rows", type=int, default=4000)
    args = parser.parse_args()

    import optuna
    from pyspark.sql import SparkSession

    from spark_hvd import Store
    from standalone_cluster import StandaloneCluster, WorkerSpec

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    prepare_environment()
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    workers = [WorkerSpec(cores=2, memory="2g"), WorkerSpec(cores=2, memory="2g")]
    with tempfile.TemporaryDirectory() as work:
        with StandaloneCluster(Path(work), workers, os.environ) as cluster:
            spark = (SparkSession.builder.master(cluster.master_url).appName("tuning bench")
                     .config("spark.executor.cores", "2").config("spark.executor.memory", "1g")
                     .config("spark.cores.max", "4").config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false")
                     .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
                     .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "60s").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            store = Store.create(f"{work}/store")
            df = _frame(spark, args.rows)
            _estimator(0.05, 1, store).fit(df)     # warm-up, untimed: workers, spares, the materialised data
            sequential, _ = _study(df, store, args, jobs=1, prune=False)
            parallel, _ = _study(df, store, args, jobs=2, prune=False)
            pruned_time, pruned = _study(df, store, args, jobs=2, prune=True)
            spark.stop()
    print(f"{args.trials} trials of 2 ranks, {args.epochs} epochs, {args.rows} rows, 4 slots")
    print("| study | wall s | / sequential |")
    print("| --- | --- | --- |")
    print(f"| sequential | {sequential:.1f} | 1.00 |")
    print(f"| 2 at a time | {parallel:.1f} | {parallel / sequential:.2f} |")
    print(f"| 2 at a time, MedianPruner ({pruned} pruned) | {pruned_time:.1f} | {pruned_time / sequential:.2f} |")


if __name__ == "__main__":
    main()
