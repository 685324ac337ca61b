"""``horovod.runner.util.threads``'s background-thread helpers, which Horovod's tests and some scripts import."""

from __future__ import annotations

import threading
from typing import Any, Callable


def in_thread(target: Callable[..., Any], args: tuple = (), name: str | None = None, daemon: bool = True,
              silent: bool = False) -> threading.Thread:
    """Starts ``target(*args)`` in a new thread and returns the thread. ``silent`` swallows what the
    target raises (otherwise the thread's exception reaches ``threading.excepthook``, as usual)."""
    if not isinstance(args, tuple):
        raise ValueError(f"args must be a tuple, not {type(args).__name__} (for a single argument use (arg,))")

    def quietly(*call_args: Any) -> None:
        try:
            target(*call_args)
        except BaseException:  # what silent asks for: nothing escapes the thread
            pass

    thread = threading.Thread(target=quietly if silent else target, args=args, name=name, daemon=daemon)
    thread.start()
    return thread


def on_event(event: threading.Event, func: Callable[..., Any], args: tuple = (), stop: threading.Event | None = None,
             check_stop_interval_s: float = 1.0, daemon: bool = True, silent: bool = False) -> threading.Thread:
    """Runs ``func(*args)`` in a new thread once ``event`` is set, unless ``stop`` is set first (checked every
    ``check_stop_interval_s``); returns the thread."""
    if not isinstance(args, tuple):
        raise ValueError(f"args must be a tuple, not {type(args).__name__} (for a single argument use (arg,))")

    def wait_then_call() -> None:
        while not event.wait(check_stop_interval_s if stop is not None else None):
            if stop is not None and stop.is_set():
                return
        func(*args)

    return in_thread(wait_then_call, name=f"on_event:{getattr(func, '__name__', 'call')}", daemon=daemon,
                     silent=silent)
