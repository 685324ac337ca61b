"""Launcher: whole lines from every rank onto one stream, and the launcher's own messages among them.

This module must stay importable without the C++ extension: the launchers use it.
"""

from __future__ import annotations

import io
import threading
from typing import IO, BinaryIO

LAUNCHER_TAG = "[collective.run]"


class LineSink:
    """Writes whole lines to one stream; the lock keeps lines from different ranks intact."""

    def __init__(self, stream: IO) -> None:
        if isinstance(stream, (io.RawIOBase, io.BufferedIOBase)):
            self._binary: BinaryIO | None = stream  # type: ignore[assignment]
        else:
            self._binary = getattr(stream, "buffer", None)
        self._text = stream
        self._lock = threading.Lock()
        self._broken = False

    def write_line(self, prefix: bytes, chunk: bytes) -> None:
        # A final line without '\n' still gets one, or the next rank's prefix would be glued on.
        line = prefix + chunk + (b"" if chunk.endswith(b"\n") else b"\n")
        with self._lock:
            if self._broken:
                return
            try:
                if self._binary is not None:
                    self._binary.write(line)
                    self._binary.flush()
                else:
                    self._text.write(line.decode("utf-8", "replace"))
                    self._text.flush()
            except (OSError, ValueError):
                # e.g. `| head` closed our stdout. Keep accepting lines so the pumps keep
                # draining the ranks' pipes; otherwise the ranks would block on a full pipe.
                self._broken = True

    def message(self, text: str) -> None:
        self.write_line(f"{LAUNCHER_TAG} ".encode(), text.encode("utf-8", "replace"))
