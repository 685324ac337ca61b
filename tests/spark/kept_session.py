"""The local[2] Spark session that the test modules of one test process share.

Starting a session costs about 9 s, and most Spark test modules ask for the same local[2] one, so it
is kept from one module to the next instead of being stopped after each. A process holds one
SparkContext at a time: anything that builds another session (a standalone cluster's, or one with
settings of its own) releases the kept one first, and the next local[2] module starts it again.
This module is imported by name from tests/spark, so every copy of the Spark conftest shares it.
"""

from __future__ import annotations

import atexit
import contextlib
from typing import Any, Callable

_kept: tuple[contextlib.AbstractContextManager, Any] | None = None


def local(open_session: Callable[[], contextlib.AbstractContextManager]) -> Any:
    """The kept session, opened with ``open_session()`` if none is kept; jobs a module left behind are cancelled."""
    global _kept
    if _kept is None:
        manager = open_session()
        spark = manager.__enter__()
        _kept = (manager, spark)
    else:
        # A module that failed mid-job must not leave the next one a busy cluster.
        _kept[1].sparkContext.cancelAllJobs()
    return _kept[1]


def release() -> None:
    """Stops the kept session, if any."""
    global _kept
    if _kept is not None:
        manager, _ = _kept
        _kept = None
        manager.__exit__(None, None, None)


atexit.register(release)
