"""Derives local and cross ranks from which host each rank runs on."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topology:
    rank: int
    size: int
    local_rank: int   # position among the ranks on this host
    local_size: int   # ranks on this host
    cross_rank: int   # position among the ranks with this local_rank (Horovod's definition)
    cross_size: int
    homogeneous: bool = True  # every host runs the same number of ranks (Horovod's is_homogeneous)


def topology_from_host_keys(rank: int, host_keys: list[str]) -> Topology:
    mine = host_keys[rank]
    same_host = [r for r, key in enumerate(host_keys) if key == mine]
    local_rank = same_host.index(rank)
    local_ranks = [
        sum(1 for earlier in host_keys[:r] if earlier == key) for r, key in enumerate(host_keys)
    ]
    cross_group = [r for r, lr in enumerate(local_ranks) if lr == local_rank]
    return Topology(
        rank=rank,
        size=len(host_keys),
        local_rank=local_rank,
        local_size=len(same_host),
        cross_rank=cross_group.index(rank),
        cross_size=len(cross_group),
        homogeneous=len({host_keys.count(key) for key in host_keys}) == 1,
    )
