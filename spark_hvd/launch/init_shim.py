"""Rank child: lets ``fn`` call ``collective.init()`` although its child process has already initialised collective.

Horovod-style functions start with ``hvd.init()``; functions written for spark_hvd may use
collective ops straight away. The child therefore initialises collective itself, from the
``COLLECTIVE_*`` variables it was given, and makes a later ``init()`` in ``fn`` behave as in
Horovod: without arguments it keeps the running job; with arguments (a Config, overrides,
another bootstrap) it leaves the launcher's mesh and builds a new one from them. Every rank runs
the same ``fn``, so every rank rebuilds in step, through the same rendezvous.

This replaces ``collective.init`` in the child process only. It stands in for a hook that
collective itself should offer: ``init()`` without arguments returning quietly when the process
is already initialised.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import collective
from collective import runtime


def install() -> Callable[[], None]:
    """Installs the tolerant init; returns the function the child calls to initialise for fn."""
    real_init = runtime.init
    launcher_comm: Any = None

    @functools.wraps(real_init)
    def init(config: Any = None, *, bootstrap: Any = None, **overrides: Any) -> None:
        if runtime.is_initialized():
            if config is None and bootstrap is None and not overrides:
                return
            if launcher_comm is not None and runtime.communicator() is launcher_comm:
                runtime.shutdown()
        real_init(config, bootstrap=bootstrap, **overrides)

    def init_for_launcher() -> None:
        nonlocal launcher_comm
        real_init()
        launcher_comm = runtime.communicator()

    runtime.init = init
    collective.init = init
    return init_for_launcher
