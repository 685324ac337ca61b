"""Rank: ``collective.init``, which joins the job (collective.runtime) and then adds the process sets it lists
(collective.process_sets, the layer above the runtime)."""

from __future__ import annotations

from typing import Any

from collective.bootstrap import Bootstrap
from collective.config import Config
from collective.process_sets import add_initial_sets
from collective.runtime import join


def init(config: Config | None = None, *, bootstrap: Bootstrap | None = None, process_sets: Any = None,
         **overrides: Any) -> None:
    """Joins the job: finds the peers, authenticates to each, and builds the mesh.

    ``config`` fields that are set win over ``COLLECTIVE_*`` environment variables; keyword
    ``overrides`` (``enable_shm=False``, ``timeout_s=30``...) win over both. ``bootstrap`` replaces
    the rendezvous (Spark and MPI pass their own).

    Calling it again is allowed, as in Horovod: without arguments it keeps the running job (a script
    that calls ``hvd.init()`` under a launcher that already joined it); with a config, a bootstrap or
    overrides it leaves the running job, as ``shutdown()`` does, and joins the one they describe. Every
    rank must then do the same, as with a first ``init()``.

    ``process_sets``: Horovod's list of ``ProcessSet`` to add once joined (every rank the same list), or
    "dynamic" (here sets may always be added later with ``add_process_set``).
    """
    join(config, bootstrap=bootstrap, **overrides)
    if process_sets is not None:
        add_initial_sets(process_sets)
