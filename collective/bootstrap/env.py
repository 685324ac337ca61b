"""Chooses and builds the Bootstrap a rank should use, from its Config."""

from __future__ import annotations

from collective.bootstrap.base import Bootstrap, SingleRankBootstrap
from collective.bootstrap.rendezvous import RendezvousBootstrap, RendezvousClient
from collective.config import ENV_RANK, ENV_RENDEZVOUS, ENV_SIZE, Config, parse_host_port


def bootstrap_from_config(config: Config) -> Bootstrap:
    """A RendezvousBootstrap when ``config.rendezvous`` is set, an MpiBootstrap under mpirun/mpiexec,
    else the single-rank Bootstrap.

    A config with no rank, size or rendezvous at all is a plain ``python script.py`` run and
    becomes a one-rank job, so scripts work unchanged outside the launcher.
    """
    rank, size, rendezvous = config.rank, config.size, config.rendezvous
    if config.launched_by_mpi and rank is None and rendezvous is None:
        from collective.bootstrap.mpi import MpiBootstrap  # imports mpi4py, so only when asked

        return MpiBootstrap()
    if size is None:
        if rank is None and rendezvous is None:
            return SingleRankBootstrap()
        raise ValueError(
            f"the job size is unknown: set {ENV_SIZE} (or Config.size) alongside "
            f"{ENV_RANK}/{ENV_RENDEZVOUS}")
    if rank is None:
        if size == 1:
            rank = 0
        else:
            raise ValueError(
                f"size={size} but this process's rank is unknown: set {ENV_RANK} "
                "(or Config.rank)")
    if rendezvous is None:
        if size == 1:
            return SingleRankBootstrap()
        raise ValueError(
            f"size={size} needs a rendezvous server: set {ENV_RENDEZVOUS}=host:port "
            "(or Config.rendezvous), or start the job with python -m collective.run")
    host, port = parse_host_port(rendezvous)
    client = RendezvousClient(host, port, config.connect_timeout_s, secret=config.secret)
    try:
        return RendezvousBootstrap(client, rank, size, config.scope)
    except BaseException:
        client.close()
        raise
