"""The framework-independent estimator machinery: Params, fit, progress, batched transform, persistence."""

from spark_hvd.estimator.base import FitPlan, HorovodEstimator
from spark_hvd.estimator.model_base import HorovodModel

__all__ = ["FitPlan", "HorovodEstimator", "HorovodModel"]
