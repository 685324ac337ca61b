"""``init`` and ``shutdown`` as Horovod scripts call them."""

from __future__ import annotations

from typing import Any

import collective
from collective.framework_init import init_and_start_engine


def init(comm: Any = None, process_sets: Any = None, **kwargs: Any) -> None:
    """Joins the job (unless ``collective.init`` already did) and starts the background engine, as Horovod's
    ``init(comm=None, process_sets=None)``.

    ``comm``: an mpi4py communicator (duplicated) or a list of ``MPI_COMM_WORLD`` ranks, under mpirun.
    ``process_sets``: a list of ``ProcessSet`` to add once joined. Other keyword arguments go to
    ``collective.init``: e.g. ``fusion_threshold_bytes``, ``cycle_time_ms``, ``timeline``, ``stall_check_s``,
    ``stall_shutdown_s``, ``timeout_s``. Calling it again is harmless, as in Horovod.
    """
    init_and_start_engine(comm, process_sets, kwargs)


def shutdown() -> None:
    """Leaves the job."""
    collective.shutdown()
