"""The exception hierarchy. The native classes are created in bindings.cc, the one place C++ errors
become Python errors; this module adds the Python-only ones and gives them all one import path."""

from collective._native import (
    AuthenticationError,
    CollectiveError,
    CollectiveTimeoutError,
    InvalidArgumentError,
    MismatchError,
    PeerFailureError,
)


class NotInitializedError(CollectiveError):
    """A collective was used before ``init()`` or after ``shutdown()``."""


__all__ = [
    "AuthenticationError",
    "CollectiveError",
    "CollectiveTimeoutError",
    "InvalidArgumentError",
    "MismatchError",
    "NotInitializedError",
    "PeerFailureError",
]
