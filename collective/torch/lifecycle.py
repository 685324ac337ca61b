"""``init`` and ``shutdown`` as Horovod scripts call them."""

from __future__ import annotations

from typing import Any

import collective
from collective.runtime import start_engine
from collective.torch.handles import forget_all


def init(**kwargs: Any) -> None:
    """Joins the job (unless ``collective.init`` already did) and starts the background engine.

    Keyword arguments go to ``collective.init``: e.g. ``fusion_threshold_bytes``, ``cycle_time_ms``,
    ``timeline``, ``stall_check_s``, ``stall_shutdown_s``. Calling it again is harmless, as in Horovod.
    """
    if not collective.is_initialized():
        collective.init(**kwargs)
    start_engine()


def shutdown() -> None:
    """Leaves the job; handles not yet synchronized are dropped."""
    forget_all()
    collective.shutdown()
