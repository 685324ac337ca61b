"""The exception hierarchy. The native classes are created in bindings.cc, the one place C++ errors
become Python errors; this module adds the Python-only ones and gives them all one import path."""

from collective import _native
from collective._native import (
    AuthenticationError,
    CollectiveError,
    CollectiveTimeoutError,
    InvalidArgumentError,
    MismatchError,
    PeerFailureError,
)


# The binding signatures this Python code calls; see ABI_VERSION in native/bindings/module.cc.
EXPECTED_NATIVE_ABI = 9
if getattr(_native, "ABI_VERSION", None) != EXPECTED_NATIVE_ABI:
    raise ImportError(
        f"collective._native is a stale build (ABI {getattr(_native, 'ABI_VERSION', None)}, this code needs "
        f"{EXPECTED_NATIVE_ABI}); rebuild it with `make build` or `pip install .`")


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
