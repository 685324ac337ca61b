"""Bench: which schedule an allreduce runs, as native/algorithms/allreduce.cc decides it.

A direct call first agrees with every peer in the descriptor round; a small tensor (n(p-1) <= 64 KiB) rides
inside that round and is done. A larger one takes the hierarchy when there are several hosts with several ranks
each, else the flat host-ordered ring. Calls through the engine skip the descriptor round: the engine's
coordinator negotiates once per cycle (``coordinator_round``), for all the tensors of that cycle.
"""

from __future__ import annotations

from .cluster import Cluster
from .hierarchical import hierarchical_allreduce
from .ring import ring_allreduce
from .rounds import HEADER_BYTES, Round, schedule_time
from .small import small_path


def is_small_call(cluster: Cluster, nbytes: float) -> bool:
    return nbytes * (cluster.ranks - 1) <= cluster.small_call_bytes


def uses_hierarchy(cluster: Cluster, nbytes: float) -> bool:
    return cluster.hosts > 1 and cluster.local_size > 1 and not is_small_call(cluster, nbytes)


def allreduce_rounds(cluster: Cluster, nbytes: float, small: str = "direct", negotiation: str = "descriptor",
                     algorithm: str = "auto") -> list[Round]:
    """The rounds of one allreduce of ``nbytes``: ``small`` is the descriptor round's form ('direct', 'log',
    'auto'); ``negotiation`` 'descriptor' (direct calls) or 'engine' (none per call); ``algorithm`` 'auto',
    'ring' or 'hierarchical' (forcing one, as Config(hierarchical_allreduce=...) does)."""
    if cluster.ranks < 2:
        return []
    if negotiation not in ("descriptor", "engine"):
        raise ValueError(f"negotiation must be 'descriptor' or 'engine', not {negotiation!r}")
    if algorithm == "auto" and is_small_call(cluster, nbytes):
        return small_path(cluster, nbytes, small, name="small: one round" if small == "direct" else "small")
    head = small_path(cluster, 0, small) if negotiation == "descriptor" else []
    hierarchical = uses_hierarchy(cluster, nbytes) if algorithm == "auto" else algorithm == "hierarchical"
    if hierarchical and cluster.hosts > 1:
        return head + hierarchical_allreduce(cluster, nbytes)
    return head + ring_allreduce(cluster, nbytes)


def allreduce_time(cluster: Cluster, nbytes: float, **how: str) -> float:
    """Seconds for one allreduce call: the call's fixed cost and its rounds (``how`` as allreduce_rounds)."""
    if cluster.ranks < 2:
        return 0.0
    return cluster.call_s + schedule_time(cluster, allreduce_rounds(cluster, nbytes, **how))


def coordinator_round(cluster: Cluster, message_bytes: float = HEADER_BYTES) -> list[Round]:
    """The engine's negotiation each cycle: every rank's message to rank 0, rank 0's answer to every rank.
    Rank 0 handles 2(p-1) messages in turn; everyone waits for it."""
    p = cluster.ranks
    if p < 2:
        return []
    link = "inter" if cluster.hosts > 1 else "intra"
    return [Round(name="engine negotiation", count=2, messages=p - 1, bytes=message_bytes, link=link,
                  egress_bytes=(p - 1) * message_bytes, cpu_bytes=(p - 1) * message_bytes, cpu_msgs=p - 1,
                  busy=1, pipelined=False)]
