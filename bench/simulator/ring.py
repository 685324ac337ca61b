"""Bench: the pipelined ring allreduce (native/algorithms/ring.cc): reduce-scatter, then allgather, 2(p-1) steps.

The ring is ordered host by host, so of its p edges only one per host crosses the network in each step; ordered
by raw rank on interleaved hosts (how Spark places partitions) every edge would cross, and a host's NIC would
carry all its ranks' chunks at once. ``host_ordered=False`` prices that ordering, to show what the order buys.
"""

from __future__ import annotations

from .cluster import Cluster
from .rounds import Round


def ring_steps(ranks: int, nbytes: float, link: str, local: int, host_ordered: bool = True,
               name: str = "ring") -> list[Round]:
    """The 2(ranks-1) steps of a ring allreduce of ``nbytes`` over ``ranks`` members, ``local`` of them per host
    busy at once. Each step moves one chunk of nbytes/ranks to the right neighbour; the receiver reduces it
    (reduce-scatter) or stores it (allgather): the CPU touches the chunk on both sides."""
    if ranks < 2:
        return []
    chunk = nbytes / ranks
    crossing = 1 if host_ordered else local
    common = dict(messages=1, bytes=chunk, link=link, egress_bytes=chunk * crossing, cpu_bytes=2 * chunk,
                  cpu_msgs=2, busy=local, working_bytes=local * nbytes)
    return [Round(name=f"{name} reduce-scatter", count=ranks - 1, **common),
            Round(name=f"{name} allgather", count=ranks - 1, **common)]


def ring_allreduce(cluster: Cluster, nbytes: float, host_ordered: bool = True) -> list[Round]:
    """The flat ring over every rank of the cluster: its steps wait on the slowest edge, a network one as soon
    as there are two hosts."""
    link = "inter" if cluster.hosts > 1 else "intra"
    return ring_steps(cluster.ranks, nbytes, link, cluster.local_size, host_ordered)


def ring_closed_form(ranks: int, nbytes: float, alpha_s: float, beta_s: float) -> float:
    """The textbook cost without contention: 2(p-1) alpha + 2(p-1)/p n beta."""
    return 2 * (ranks - 1) * alpha_s + 2 * (ranks - 1) / ranks * nbytes * beta_s
