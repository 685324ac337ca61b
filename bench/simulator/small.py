"""Bench: the small-message paths and the call descriptor round.

Today (native/algorithms/descriptor.cc) each rank sends its call descriptor, with a small tensor inline, to all
p-1 peers in one round, and every rank reduces all p copies in rank order. The log-round alternative is a
Bruck allgather of the same blocks: ceil(log2 p) rounds, in round k a block set of min(2^k, p-2^k) blocks to the
rank 2^k away; the same bytes in total, log2 p messages instead of p-1. The automatic choice compares the two
with the plain alpha-beta formula (latency, per-message overhead, bytes), as the native code would.
"""

from __future__ import annotations

import math

from .cluster import Cluster
from .rounds import HEADER_BYTES, Round


def _link(cluster: Cluster) -> str:
    return "inter" if cluster.hosts > 1 else "intra"


def direct_round(cluster: Cluster, nbytes: float, name: str = "descriptor round") -> list[Round]:
    """One round: a descriptor (and ``nbytes`` inline) to every peer, then a local reduction of p copies."""
    p, local = cluster.ranks, cluster.local_size
    if p < 2:
        return []
    block = HEADER_BYTES + nbytes
    remote = p - local if cluster.hosts > 1 else 0
    return [Round(name=name, count=1, messages=p - 1, bytes=block, link=_link(cluster),
                  egress_bytes=local * remote * block, cpu_bytes=2 * (p - 1) * block + (p - 1) * nbytes,
                  cpu_msgs=2 * (p - 1), busy=local, pipelined=False, working_bytes=local * p * block)]


def log_rounds(cluster: Cluster, nbytes: float, name: str = "log rounds") -> list[Round]:
    """A Bruck allgather of the descriptor blocks: ceil(log2 p) rounds, then the same local reduction."""
    p, local = cluster.ranks, cluster.local_size
    if p < 2:
        return []
    block = HEADER_BYTES + nbytes
    steps = []
    for k in range(math.ceil(math.log2(p))):
        blocks = min(2 ** k, p - 2 ** k)
        crossing = min(local, 2 ** k) if cluster.hosts > 1 else 0
        last = k == math.ceil(math.log2(p)) - 1
        steps.append(Round(name=name, count=1, messages=1, bytes=blocks * block, link=_link(cluster),
                           egress_bytes=crossing * blocks * block,
                           cpu_bytes=2 * blocks * block + ((p - 1) * nbytes if last else 0),
                           cpu_msgs=2, busy=local, pipelined=False, working_bytes=local * p * block))
    return steps


def alpha_beta_direct(cluster: Cluster, nbytes: float) -> float:
    """The choice's estimate of the one-round path: one latency, p-1 message overheads, (p-1) blocks."""
    link = cluster.inter if cluster.hosts > 1 else cluster.intra
    p = cluster.ranks
    return link.alpha_s + (p - 1) * (2 * cluster.cpu_msg_s + (HEADER_BYTES + nbytes) * link.beta())


def alpha_beta_log(cluster: Cluster, nbytes: float) -> float:
    """The choice's estimate of the log-round path: ceil(log2 p) latencies and overheads, the same bytes."""
    link = cluster.inter if cluster.hosts > 1 else cluster.intra
    p = cluster.ranks
    rounds = math.ceil(math.log2(p)) if p > 1 else 0
    return rounds * (link.alpha_s + 2 * cluster.cpu_msg_s) + (p - 1) * (HEADER_BYTES + nbytes) * link.beta()


def choose_small_path(cluster: Cluster, nbytes: float) -> str:
    """'direct' or 'log', whichever the alpha-beta estimate says is faster."""
    return "log" if alpha_beta_log(cluster, nbytes) < alpha_beta_direct(cluster, nbytes) else "direct"


def small_path(cluster: Cluster, nbytes: float, mode: str, name: str = "descriptor round") -> list[Round]:
    """The descriptor round as ``mode`` ('direct', 'log' or 'auto') runs it."""
    if mode == "auto":
        mode = choose_small_path(cluster, nbytes)
    if mode == "direct":
        return direct_round(cluster, nbytes, name)
    if mode == "log":
        return log_rounds(cluster, nbytes, name)
    raise ValueError(f"small-message mode must be 'direct', 'log' or 'auto', not {mode!r}")
