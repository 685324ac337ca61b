"""Rank child: tells fn's exceptions that only react to another rank's failure from root causes.

The driver blames the first failure that is not such a reaction, so a rank that merely saw its
peer vanish is never named as the one that failed.
"""

from __future__ import annotations

import collective

# How torch.distributed reports a peer that went away: gloo's TCP pairs raise a plain
# RuntimeError with the first three; NCCL's DistBackendError (a RuntimeError) carries the last.
_TORCH_PEER_LOST = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "remote process exited or there was a network error",
)


def is_peer_failure(error: BaseException) -> bool:
    if isinstance(error, collective.PeerFailureError):
        return True
    return isinstance(error, RuntimeError) and any(text in str(error) for text in _TORCH_PEER_LOST)
