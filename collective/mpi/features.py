"""Rank: the MPI backend's engine features, frozen against the native engine's (README, "How it works").

The MPI engine is a separate backend with a fixed feature set, not a second implementation that follows
the native engine. Each feature of the native engine is listed here with what the MPI engine does
about it, and a setting that asks for one it lacks is refused by name, so a job never silently runs
differently from what its configuration says. tests/mpi/test_mpi_units.py pins this table.
"""

from __future__ import annotations

from typing import NamedTuple

from collective.config import Config
from collective.errors import InvalidArgumentError


class Feature(NamedTuple):
    supported: bool
    note: str


FEATURES: dict[str, Feature] = {
    "negotiation": Feature(True, "named requests, agreement checked on every rank (MismatchError names the ranks)"),
    "fusion": Feature(True, "allreduces of one dtype, op and scaling, each at most 1 MiB (as natively), up "
                            "to fusion_threshold_bytes; a group's larger members are not fused with it"),
    "response cache": Feature(True, "whole announced batches, by position (cache_capacity); a step whose "
                                    "requests come in another order is a miss (native: one id per request)"),
    "timeline": Feature(True, "rank 0 writes the native engine's Chrome trace format"),
    "join": Feature(True, "a joined rank contributes zeros to allreduces; other kinds are refused as natively"),
    "stall inspector": Feature(True, "stall_check_s warnings and stall_shutdown_s failures name the missing ranks"),
    "process sets": Feature(True, "each set on its own MPI communicator (also ProcessSet(mpi_comm))"),
    "grouped negotiation": Feature(False, "group members are accepted but negotiated one by one (they still fuse)"),
    "hierarchical allreduce": Feature(False, "the MPI library chooses its own algorithms"),
    "blame of a dead peer": Feature(False, "MPI cannot say which peer stopped: a timeout, or mpiexec ends the job"),
}


def check_supported(config: Config) -> None:
    """Refuses a configuration that asks for a native-only engine feature, naming it."""
    if config.hierarchical_allreduce:
        raise InvalidArgumentError(
            "hierarchical_allreduce=True (HOROVOD_HIERARCHICAL_ALLREDUCE) is a feature of the native engine "
            f"only: on backend='mpi' {FEATURES['hierarchical allreduce'].note}; leave it unset, or use "
            "backend='ring'")
