"""Rank child: a checkpoint is resumed only by the fit it belongs to.

Every framework's checkpoint records the plan's ``fit_key`` (estimator/fit_identity.py). The driver already
chose a run whose record is this fit (estimator/run_claim.py); this check, on rank 0 before it restores,
catches what the driver could not see: a fit of another driver that took the run meanwhile, or a checkpoint
written by a version that recorded no fit.
"""

from __future__ import annotations

from spark_hvd.errors import CheckpointMismatchError
from spark_hvd.recipe.plan import FitPlan

# The key under which a checkpoint records its fit (a torch dict's, a Keras pointer's, a Lightning checkpoint's).
FIT_KEY = "spark_hvd_fit"


def check_checkpoint_fit(plan: FitPlan, recorded: str | None) -> None:
    """Raise rather than resume a checkpoint of run ``plan.run_id`` that records another fit than ``plan``'s."""
    if plan.fit_key is None or recorded == plan.fit_key:
        return
    whose = "records no fit" if recorded is None else f"belongs to another fit ({recorded})"
    raise CheckpointMismatchError(
        f"the checkpoint of run {plan.run_id!r} {whose}, not this one ({plan.fit_key}: its data, model or training "
        "parameters differ); it is not resumed. Fit with another run_id, or delete the run's directory under the "
        "Store to train this fit there from the start")
