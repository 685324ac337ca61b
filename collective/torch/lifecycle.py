"""``init`` and ``shutdown`` as Horovod scripts call them."""

from __future__ import annotations

from typing import Any

import collective
from collective.process_sets import add_initial_sets
from collective.runtime import current, start_engine
from collective.torch.cuda_context import release_cuda_context
from collective.torch.handles import forget_all


def init(**kwargs: Any) -> None:
    """Joins the job (unless ``collective.init`` already did) and starts the background engine.

    Keyword arguments go to ``collective.init``: e.g. ``fusion_threshold_bytes``, ``cycle_time_ms``,
    ``timeline``, ``stall_check_s``, ``stall_shutdown_s``; ``process_sets`` as Horovod's (a list of ``ProcessSet`` to add). Calling it again is harmless, as in Horovod.
    """
    process_sets = kwargs.pop("process_sets", None)
    # Arguments before the engine starts are for collective.init even if the process already joined
    # (spark_hvd.run's child has; its init rebuilds the mesh with them).
    if not collective.is_initialized() or (kwargs and current().engine is None):
        collective.init(**kwargs)
    start_engine()
    add_initial_sets(process_sets)


def shutdown() -> None:
    """Leaves the job; handles not yet synchronized are dropped."""
    forget_all()
    release_cuda_context()
    collective.shutdown()
