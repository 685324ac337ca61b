"""Driver: tuning distributed fits. ``spark_hvd.tuning.fit_trial`` fits an estimator as one Optuna trial;
Spark ML's CrossValidator and TrainValidationSplit tune the estimators as they are (docs/tuning.md)."""

from spark_hvd.tuning.optuna_trial import fit_trial, last_metric

__all__ = ["fit_trial", "last_metric"]
