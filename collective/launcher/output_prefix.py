"""Launcher and driver: the prefix of each rank's output line, in Horovod's format.

``[rank]<stdout>:line`` and ``[rank]<stderr>:line``, with no space after the colon, as horovodrun and
horovod.spark.run write them: Horovod's own tests and the log parsers built for it read exactly this.
A timestamp, when asked for, comes first (``Mon Jan  1 12:00:00 2024[0]<stdout>:line``), as Horovod's.

This module must stay importable without the C++ extension: the launcher uses it.
"""

from __future__ import annotations


def rank_line_prefix(rank: int | str, stream: str, timestamp: str = "") -> bytes:
    """The bytes before a line that ``rank`` (a rank number, or an elastic worker's ``host:slot``) wrote to
    ``stream`` ("stdout" or "stderr")."""
    return f"{timestamp}[{rank}]<{stream}>:".encode("utf-8", "replace")
