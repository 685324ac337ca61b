"""Launcher: what a supervisor waits for (a rank's exit, a signal to the launcher, a stop request), as events
on one queue, and the two ways that are not rank exits get there (``Stopper``, ``SignalsAsEvents``).

This module must stay importable without the C++ extension: it only starts processes.
"""

from __future__ import annotations

import queue
import signal
import threading
from dataclasses import dataclass
from typing import Any, Union

_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class Exited:
    rank: Any  # a rank number, or an elastic worker's "host:slot"
    returncode: int


@dataclass(frozen=True)
class Signalled:
    signum: int


@dataclass(frozen=True)
class Stopped:
    pass


Event = Union[Exited, Signalled, Stopped]


class Stopper:
    """Lets another thread end a ``launch()``: ``stop()`` tears the ranks down as a signal would.

    A caller that runs ``launch()`` in a thread of its own (signal handlers only work in the main
    thread) uses this to cancel it. Stopping before the launch starts ends it right after spawning.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: "queue.SimpleQueue[Event] | None" = None
        self._stopped = False

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._events is not None:
                self._events.put(Stopped())

    def attach(self, events: "queue.SimpleQueue[Event]") -> None:
        """Launcher: stop requests go to ``events`` from now on (one made before counts at once)."""
        with self._lock:
            self._events = events
            if self._stopped:
                events.put(Stopped())


class SignalsAsEvents:
    """Context manager: while active, SIGINT/SIGTERM/SIGHUP become events for the supervisor."""

    def __init__(self, events: "queue.SimpleQueue[Event]") -> None:
        self._events = events
        self._previous: dict[int, object] = {}

    def __enter__(self) -> None:
        # signal.signal only works in the main thread; elsewhere the caller keeps its handlers.
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in _FORWARDED_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: object) -> None:
        self._events.put(Signalled(signum))
