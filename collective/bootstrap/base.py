"""The minimal contract for exchanging bytes between ranks before the data-plane mesh exists.

Anything that can run an allgather of small payloads (a TCP store, Spark's
BarrierTaskContext.allGather, MPI) can bootstrap the mesh, so the interface stays tiny.
"""

from __future__ import annotations

import abc
from types import TracebackType
from typing import TypeVar

_Self = TypeVar("_Self", bound="Closing")


class Closing:
    """Mixin: ``with thing:`` closes ``thing`` on the way out (its ``close()``, which the class defines)."""

    def close(self) -> None:
        """Releases what the object holds; the default holds nothing."""

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class FixedMembership:
    """Mixin: a member of a group whose ``rank`` and ``size`` are fixed when it is made (``_rank``, ``_size``)."""

    _rank: int
    _size: int

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size


class Bootstrap(Closing, abc.ABC):
    """Out-of-band channel used once per mesh build to swap addresses and metadata.

    Implementations need not be fast; they must be correct across processes and hosts.
    """

    @property
    @abc.abstractmethod
    def rank(self) -> int:
        """This process's rank in [0, size)."""

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """Number of ranks in the job."""

    @abc.abstractmethod
    def allgather(self, payload: bytes, timeout_s: float) -> list[bytes]:
        """Contributes ``payload`` and returns every rank's payload, indexed by rank.

        Every rank must make the same sequence of calls; implementations tag each call with a
        sequence number so consecutive calls never see each other's payloads.
        Raises TimeoutError if some rank has not contributed within ``timeout_s``.
        """

    @abc.abstractmethod
    def local_address(self) -> str | None:
        """The local IP this process used to reach the bootstrap service, if there is one.

        Peers can usually reach us on the same interface, so it is the default advertise host.
        """

    def host_key(self) -> str | None:
        """This rank's physical-host identity when the bootstrap knows it better (MPI); else None."""
        return None

    def job_secret(self) -> bytes | None:
        """A secret the bootstrap shared among the ranks when the launcher gave none (MPI); else None."""
        return None

    def close(self) -> None:
        """Releases connections; the default has nothing to release."""


class SingleRankBootstrap(Bootstrap):
    """The trivial job of one rank: nobody to exchange with, so no service is needed."""

    @property
    def rank(self) -> int:
        return 0

    @property
    def size(self) -> int:
        return 1

    def allgather(self, payload: bytes, timeout_s: float) -> list[bytes]:
        return [bytes(payload)]

    def local_address(self) -> str | None:
        return None
