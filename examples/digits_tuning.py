"""Tuning distributed fits on scikit-learn's digits: Optuna trials side by side, pruned early, then Spark ML's
TrainValidationSplit over the winner's neighbourhood, scored by MulticlassClassificationEvaluator.

    python examples/digits_tuning.py --trials 6 --jobs 2

Each trial is one TorchEstimator fit of 2 ranks in a barrier stage of its own; ``--jobs`` of them run at once
(local[4] has slots for two fits of two ranks). A MedianPruner stops a trial whose validation loss is worse
than the median of the finished ones at the same epoch.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import torch

import digits_model
from digits_model import class_loss, digits_classifier, digits_frames, local_spark_session


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()

    import cloudpickle
    import optuna
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.tuning import ParamGridBuilder, TrainValidationSplit

    from spark_hvd import Store, TorchEstimator
    from spark_hvd.tuning import fit_trial, last_metric

    cloudpickle.register_pickle_by_value(digits_model)
    spark = local_spark_session("spark-hvd-tuning", master="local[4]")
    spark.sparkContext.setLogLevel("ERROR")
    store = Store.create(f"{tempfile.mkdtemp(prefix='spark-hvd-tuning-')}/store")
    train, held_out = digits_frames(spark)

    def estimator(lr: float, epochs: int) -> TorchEstimator:
        model = digits_classifier()
        return TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=lr),
                              loss=class_loss, feature_cols=["features"], label_cols=["label"], validation=0.2,
                              batch_size=32, epochs=epochs, store=store, verbose=0, random_seed=0,
                              classification="logits")

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("lr", 1e-5, 3e-2, log=True)
        return last_metric(fit_trial(trial, estimator(lr, args.epochs), train), "val_loss")

    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=0),
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=2))
    study.optimize(objective, n_trials=args.trials, n_jobs=args.jobs)
    pruned = sum(trial.state == optuna.trial.TrialState.PRUNED for trial in study.trials)
    best_lr = study.best_trial.params["lr"]
    print(f"optuna: {len(study.trials)} trials, {pruned} pruned; best lr={best_lr:.3g} "
          f"(val_loss {study.best_value:.4f})")

    # Spark ML's own tuning over the best rate and its neighbours, two fits at a time.
    base = estimator(best_lr, args.epochs)
    grid = ParamGridBuilder().addGrid(base.epochs, [2, args.epochs]).build()
    evaluator = MulticlassClassificationEvaluator(labelCol="label", metricName="accuracy")
    tuned = TrainValidationSplit(estimator=base, estimatorParamMaps=grid, evaluator=evaluator, parallelism=2,
                                 seed=0).fit(train)
    accuracy = evaluator.evaluate(tuned.bestModel.transform(held_out))
    print(f"TrainValidationSplit: validation accuracies {[round(m, 3) for m in tuned.validationMetrics]}; "
          f"held-out accuracy of the best model {accuracy:.3f}")
    spark.stop()
    return 0 if accuracy > 0.85 else 1


if __name__ == "__main__":
    sys.exit(main())
