"""Builds the MPI backend's communicator once the bootstrap has found the ranks."""

from __future__ import annotations

from collective.bootstrap.base import Bootstrap
from collective.errors import InvalidArgumentError
from collective.mpi.communicator import MpiCommunicator


def mpi_communicator(bootstrap: Bootstrap, host_key: str, timeout_s: float) -> tuple[MpiCommunicator, list[str]]:
    """An MpiCommunicator over the bootstrap's communicator (COMM_WORLD unless ``init(comm=...)`` gave one),
    and every rank's host key (for the topology)."""
    from collective.bootstrap.mpi import MpiBootstrap, mpi_world

    world = bootstrap.comm if isinstance(bootstrap, MpiBootstrap) else mpi_world()
    if not isinstance(bootstrap, MpiBootstrap) and bootstrap.size != world.Get_size():
        raise InvalidArgumentError(
            f"backend='mpi' needs the job started by mpirun/mpiexec: this job has {bootstrap.size} ranks but "
            f"MPI sees {world.Get_size()} (start it with: mpiexec -n {bootstrap.size} python script.py)")
    host_keys = [raw.decode() for raw in bootstrap.allgather(host_key.encode(), timeout_s)]
    return MpiCommunicator(world, host_keys), host_keys
