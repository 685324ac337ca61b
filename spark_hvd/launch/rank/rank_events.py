"""Rank child: structured events from a rank to the driver: ``spark_hvd.emit_event({...})`` inside ``fn``.

They travel on the child's report pipe to its task and on the task's output connection to the
driver, where ``spark_hvd.run(..., on_event=callback)`` receives ``callback(rank, data)`` in the
driver's thread while the job runs. Estimators use this for live progress and metrics.
"""

from __future__ import annotations

import threading
from typing import Any, BinaryIO, Mapping

from spark_hvd.launch.framing import write_frame

EVENT_KIND = "event"
COMMIT_KIND = "commit"   # {"seq": n} + the pickled snapshot of rank 0's commit (spark_hvd.run_elastic)

_lock = threading.Lock()
_stream: BinaryIO | None = None


def attach(stream: BinaryIO) -> None:
    """Called once by the child before fn runs: events go to this stream (the report pipe)."""
    global _stream
    with _lock:
        _stream = stream


def detach() -> None:
    """Called by the child before it writes its final report; later events are dropped."""
    global _stream
    with _lock:
        _stream = None


def emit_event(data: Mapping[str, Any]) -> bool:
    """Sends one JSON-serialisable mapping to the driver. Returns False where no driver listens
    (outside spark_hvd.run, or after fn returned); never raises for a closed channel."""
    if not isinstance(data, Mapping):
        raise TypeError(f"emit_event takes a mapping, got {type(data).__name__}")
    return send_frame({"kind": EVENT_KIND, "data": dict(data)})


def send_frame(header: dict[str, Any], blob: bytes = b"") -> bool:
    """Writes one frame to the task, between fn's other frames; False where nobody listens."""
    with _lock:
        if _stream is None:
            return False
        try:
            write_frame(_stream, header, blob)
        except (OSError, ValueError):
            return False
    return True
