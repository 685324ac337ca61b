"""Text streams for tests that watch what spark_hvd.run prints, and process-exit waits."""

from __future__ import annotations

import io
import os
import re
import select
import threading


class WatchedStream(io.StringIO):
    """A StringIO that lets a test wait, with a deadline, for lines matching a pattern."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = threading.Condition()

    def write(self, text: str) -> int:
        with self._changed:
            written = super().write(text)
            self._changed.notify_all()
        return written

    def wait_for_matches(self, pattern: str, count: int, timeout_s: float,
                         give_up_on: str | None = None) -> list[re.Match[str]]:
        """Waits for ``count`` matches; raises at the deadline or once ``give_up_on`` appears."""
        regex = re.compile(pattern)
        with self._changed:
            found: list[re.Match[str]] = []

            def settled() -> bool:
                found[:] = list(regex.finditer(self.getvalue()))
                return len(found) >= count or (give_up_on is not None and give_up_on in self.getvalue())

            if not self._changed.wait_for(settled, timeout_s) or len(found) < count:
                raise AssertionError(
                    f"{count} x {pattern!r} not seen within {timeout_s:g}s: {self.getvalue()!r}")
            return found


def wait_for_exit(pid: int, timeout_s: float) -> bool:
    """Whether process ``pid`` (not necessarily our child) ended within the deadline."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout_s)
        return bool(readable)
    finally:
        os.close(fd)
