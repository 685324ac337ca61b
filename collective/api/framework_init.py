"""Rank: ``hvd.init(comm=None, process_sets=None)`` as ``horovod.torch`` and ``horovod.tensorflow`` define it,
shared by the framework bindings: join the job (unless already joined), start the engine, add the initial sets."""

from __future__ import annotations

from typing import Any, Sequence

import collective
from collective.process_sets import add_initial_sets
from collective.runtime import current, start_engine


def init(comm: Any = None, process_sets: Any = None, **kwargs: Any) -> None:
    """Joins the job (unless ``collective.init`` already did) and starts the background engine, as Horovod's
    ``init(comm=None, process_sets=None)``.

    ``comm``: an mpi4py communicator (duplicated) or a list of ``MPI_COMM_WORLD`` ranks, under mpirun.
    ``process_sets``: a list of ``ProcessSet`` to add once joined. Other keyword arguments go to
    ``collective.init``: e.g. ``fusion_threshold_bytes``, ``cycle_time_ms``, ``timeline``, ``stall_check_s``,
    ``stall_shutdown_s``, ``timeout_s``. Calling it again is harmless, as in Horovod.
    """
    init_and_start_engine(comm, process_sets, kwargs)


def init_and_start_engine(comm: Any, process_sets: Any, kwargs: dict[str, Any]) -> None:
    """Joins the job with ``collective.init(**kwargs)`` (over ``comm`` when one is given), starts the
    background engine and adds ``process_sets``.

    Arguments given before the engine starts are for ``collective.init`` even when the process already
    joined (``spark_hvd.run``'s child has; its init rebuilds the mesh with them).
    """
    if comm is not None:
        kwargs = {**kwargs, "bootstrap": communicator_bootstrap(comm)}
    if not collective.is_initialized() or (kwargs and current().engine is None):
        collective.init(**kwargs)
    start_engine()
    add_initial_sets(process_sets)


def communicator_bootstrap(comm: Any) -> Any:
    """The bootstrap for Horovod's ``comm``: an mpi4py communicator (duplicated, as Horovod does), or a list
    of ``MPI_COMM_WORLD`` ranks that form the job. Raises ValueError for anything else, and on a rank the
    list leaves out (Horovod leaves such a rank without a job; here it is told so at once)."""
    from collective.bootstrap.mpi import MpiBootstrap, mpi_world  # imports mpi4py: only when a comm is given

    world = mpi_world()
    if isinstance(comm, (list, tuple)):
        return MpiBootstrap(_world_subset(world, comm))
    if not hasattr(comm, "Get_rank") or not hasattr(comm, "Dup"):
        raise ValueError(f"init(comm=...) takes an mpi4py communicator or a list of MPI_COMM_WORLD ranks, "
                         f"got {type(comm).__name__}")
    from mpi4py import MPI

    if comm == MPI.COMM_NULL:
        raise ValueError(f"init(comm=...): MPI_COMM_WORLD rank {world.Get_rank()} passed MPI.COMM_NULL; only "
                         f"the communicator's members call init with it")
    return MpiBootstrap(comm.Dup())


def _world_subset(world: Any, ranks: Sequence[Any]) -> Any:
    size, me = world.Get_size(), world.Get_rank()
    wanted = list(ranks)
    bad = [r for r in wanted if not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < size]
    if bad or not wanted or len(set(wanted)) != len(wanted):
        raise ValueError(f"init(comm={wanted}): the list must hold distinct MPI_COMM_WORLD ranks in "
                         f"0..{size - 1}" + (f"; not ranks: {bad}" if bad else ""))
    if me not in wanted:
        raise ValueError(f"init(comm={wanted}) on MPI_COMM_WORLD rank {me}, which the list leaves out: only "
                         f"the listed ranks call init with it")
    # Create_group is collective over the group's members only, so the ranks left out need not take part.
    return world.Create_group(world.Get_group().Incl(wanted))
