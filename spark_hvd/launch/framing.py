"""Driver, task and rank child: length-prefixed frames (a small JSON header, an optional binary blob) over a stream.

Used on the pipes between a task and its child and on the task-to-driver output connection, so
neither side ever unpickles bytes it did not produce itself (results stay opaque blobs).

    frame = header_len(u32) header(JSON, UTF-8) blob_len(u64) blob
"""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

_HEADER_LEN = struct.Struct("!I")
_BLOB_LEN = struct.Struct("!Q")
MAX_HEADER_BYTES = 16 << 20


class FrameError(ConnectionError):
    """The stream ended mid-frame or carried something that is not a frame."""


def write_frame(stream: BinaryIO, header: dict[str, Any], blob: bytes = b"") -> None:
    """Writes one frame and flushes it (frames are messages; nobody should wait for a buffer)."""
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    if len(encoded) > MAX_HEADER_BYTES:
        raise ValueError(f"frame header of {len(encoded)} bytes exceeds {MAX_HEADER_BYTES}")
    stream.write(_HEADER_LEN.pack(len(encoded)) + encoded + _BLOB_LEN.pack(len(blob)))
    if blob:
        stream.write(blob)
    stream.flush()


def read_frame(stream: BinaryIO, max_blob_bytes: int | None = None) -> tuple[dict[str, Any], bytes] | None:
    """Reads one frame; None at a clean end of stream (between frames)."""
    first = stream.read(_HEADER_LEN.size)
    if not first:
        return None
    (header_len,) = _HEADER_LEN.unpack(_exactly(stream, _HEADER_LEN.size, first))
    if header_len > MAX_HEADER_BYTES:
        raise FrameError(f"frame header of {header_len} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = json.loads(_exactly(stream, header_len).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FrameError(f"frame header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise FrameError("frame header is not a JSON object")
    (blob_len,) = _BLOB_LEN.unpack(_exactly(stream, _BLOB_LEN.size))
    if max_blob_bytes is not None and blob_len > max_blob_bytes:
        raise FrameError(f"frame blob of {blob_len} bytes exceeds {max_blob_bytes}")
    return header, _exactly(stream, blob_len)


def _exactly(stream: BinaryIO, n: int, start: bytes = b"") -> bytes:
    chunks = [start]
    got = len(start)
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            raise FrameError(f"stream ended after {got} of {n} bytes of a frame")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
