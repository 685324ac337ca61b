"""Task: the output channel of a rank whose driver cannot be dialled (a Spark Connect client): what the
rank would have sent the driver's OutputCollector is kept here, and leaves with the barrier stage's own
output row. The driver replays it into its collector, so lines, events and failures end up exactly where
a dialled-back connection would have put them, only at the end of the stage.

Same interface as OutputSender, with the same frame headers (output_channel.KIND_*).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from spark_hvd.errors import RankFailure
from spark_hvd.launch.task.output_channel import KIND_EVENT, KIND_FAILURE, KIND_LINE, KIND_NOTICE

# A row travels whole through Spark and gRPC: keep a rank's output lines bounded (the newest are kept).
MAX_LINE_CHARS = 4 << 20


class StageOutbox:
    """Keeps every event, failure and notice, and the newest output lines up to MAX_LINE_CHARS."""

    driver_listening = False   # nobody on the driver's side can end this task's wait early

    def __init__(self, max_line_chars: int = MAX_LINE_CHARS) -> None:
        self._lock = threading.Lock()
        self._frames: list[dict[str, Any]] = []
        self._line_chars = 0
        self._max_line_chars = max_line_chars
        self._dropped_lines = 0

    def send_line(self, stream: str, text: str) -> None:
        with self._lock:
            self._frames.append({"kind": KIND_LINE, "stream": stream, "text": text})
            self._line_chars += len(text)
            self._drop_old_lines()

    def send_notice(self, text: str) -> None:
        self._append({"kind": KIND_NOTICE, "text": text})

    def send_event(self, data: dict[str, Any]) -> None:
        self._append({"kind": KIND_EVENT, "data": data})

    def send_failure(self, failure: RankFailure) -> None:
        self._append({"kind": KIND_FAILURE, **failure.to_wire()})

    def send_commit(self, seq: int, blob: bytes) -> None:
        """Dropped: a commit is worth keeping only if it reaches the driver before the stage fails, which a row
        cannot do (run_elastic refuses such a driver)."""

    def close(self) -> None:
        """Nothing to flush: the frames leave with the task's row."""

    def to_bytes(self) -> bytes:
        with self._lock:
            frames = list(self._frames)
            if self._dropped_lines:
                frames.insert(0, {"kind": KIND_NOTICE, "text": f"{self._dropped_lines} earlier output line(s) "
                                  f"dropped: a rank's row carries its newest {self._max_line_chars} characters"})
        return json.dumps(frames, separators=(",", ":")).encode("utf-8")

    def _append(self, frame: dict[str, Any]) -> None:
        with self._lock:
            self._frames.append(frame)

    def _drop_old_lines(self) -> None:
        # Rare (a rank printing megabytes): a linear pass is fine.
        while self._line_chars > self._max_line_chars:
            index = next(i for i, f in enumerate(self._frames) if f["kind"] == KIND_LINE)
            self._line_chars -= len(self._frames.pop(index)["text"])
            self._dropped_lines += 1


def frames_from_bytes(blob: bytes) -> list[dict[str, Any]]:
    """The driver's side: the frames a StageOutbox carried, in the order they were sent."""
    frames = json.loads(blob.decode("utf-8"))
    if not isinstance(frames, list) or not all(isinstance(f, dict) for f in frames):
        raise ValueError("a rank's stage output is not a list of frames")
    return frames
