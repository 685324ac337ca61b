"""Out-of-band exchange used to build the data-plane mesh (no C++ extension needed here)."""

from collective.bootstrap.base import Bootstrap, SingleRankBootstrap
from collective.bootstrap.env import bootstrap_from_config
from collective.bootstrap.rendezvous import (
    RendezvousBootstrap,
    RendezvousClient,
    RendezvousError,
    RendezvousServer,
)

__all__ = [
    "Bootstrap",
    "RendezvousBootstrap",
    "RendezvousClient",
    "RendezvousError",
    "RendezvousServer",
    "SingleRankBootstrap",
    "bootstrap_from_config",
]
