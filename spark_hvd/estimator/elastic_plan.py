"""Driver: the checks of an estimator's ``elastic=True`` parameters before launch. The plan the ranks get
(``ElasticPlan``, ``EpochSteps``) is in spark_hvd/recipe/plan.py, which the ranks import without pyspark."""

from __future__ import annotations

from typing import Any

from spark_hvd.errors import InputError
from spark_hvd.recipe.plan import ElasticPlan, EpochSteps  # noqa: F401 - the driver's names for them


def checked_elastic_bounds(estimator: Any, num_proc: int) -> tuple[int, int]:
    """(min_num_proc, max_num_proc) of an ``elastic=True`` fit on ``num_proc`` ranks, checked before launch:
    each defaults to num_proc, and min_num_proc <= num_proc <= max_num_proc."""
    # The public name (spark_hvd.lightning.TorchEstimator), since two estimators are called TorchEstimator.
    name = f"{type(estimator).__module__.rsplit('.', 1)[0]}.{type(estimator).__name__}"
    if not estimator.elastic_supported:
        raise InputError(f"elastic=True: {name} has no elastic training yet; use spark_hvd.torch.TorchEstimator, "
                         "spark_hvd.keras.KerasEstimator or spark_hvd.lightning.TorchEstimator, or fit with "
                         "elastic=False (a refit with the same run_id resumes from the last epoch)")
    min_np = estimator.getMinNumProc() or num_proc
    max_np = estimator.getMaxNumProc() or max(num_proc, min_np)
    if max_np < num_proc:
        raise InputError(f"elastic=True: max_num_proc ({max_np}) is less than num_proc ({num_proc}), the ranks "
                         "the fit starts with")
    if min_np > max_np:
        raise InputError(f"elastic=True: min_num_proc ({min_np}) is greater than max_num_proc ({max_np})")
    if min_np > num_proc:
        raise InputError(f"elastic=True: min_num_proc ({min_np}) is greater than num_proc ({num_proc}), the "
                         "ranks the fit starts with")
    return min_np, max_np


def check_no_elastic_params(estimator: Any) -> None:
    """min_num_proc, max_num_proc and elastic_commit_steps mean something only with elastic=True."""
    given = [name for name in ("min_num_proc", "max_num_proc") if estimator.isSet(name)]
    if given:
        raise InputError(f"{', '.join(given)} given without elastic=True: set elastic=True for an elastic fit")
