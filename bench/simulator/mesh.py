"""Bench: forming the mesh (native/transport/mesh.cc), full today and lazy as proposed.

Full: every pair holds two TCP connections (control and data), each opened with an HMAC challenge; rank j dials
ranks 0..j-1 one after another, so the last rank makes 2(p-1) handshakes in a row, and a host's cores run
2L(p-1) handshake ends in all. Lazy: only the two ring neighbours at formation; any other peer is dialled the
first time an algorithm sends to it, so what formation saves depends on which peers the algorithms then use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .cluster import Cluster


@dataclass(frozen=True)
class Handshakes:
    """One connection's price: ``wire_s`` of round trips while the peer answers, ``cpu_s`` at each end (socket
    setup, the HMAC, the listener's turn); ``setup_s`` is what formation costs beyond the connections."""

    wire_s: float
    cpu_s: float
    setup_s: float


def for_cluster(cluster: Cluster) -> Handshakes:
    """Defaults for a real network: three round trips of the inter-host latency, 50 us of CPU at each end."""
    return Handshakes(wire_s=6 * cluster.inter.alpha_s, cpu_s=50e-6, setup_s=0.05)


def _connections(cluster: Cluster, hs: Handshakes, in_a_row: int, ends_per_rank: float) -> float:
    """``in_a_row`` connections dialled one after another by the slowest rank, while each rank of a host runs
    ``ends_per_rank`` handshake ends on the host's shared cores."""
    share = cluster.cpu_share(cluster.local_size)
    chain = in_a_row * (hs.wire_s + 2 * hs.cpu_s * share)
    host_cpu = cluster.local_size * ends_per_rank * hs.cpu_s / cluster.cores_per_host
    return max(chain, host_cpu)


def full_mesh_time(cluster: Cluster, hs: Handshakes) -> float:
    p = cluster.ranks
    if p < 2:
        return hs.setup_s
    return hs.setup_s + _connections(cluster, hs, 2 * (p - 1), 2 * (p - 1))


def lazy_mesh_time(cluster: Cluster, hs: Handshakes) -> float:
    """Formation with the ring neighbours only: two peers, two connections each."""
    if cluster.ranks < 2:
        return hs.setup_s
    peers = min(2, cluster.ranks - 1)
    return hs.setup_s + _connections(cluster, hs, 2 * peers, 2 * peers)


def first_use_time(cluster: Cluster, hs: Handshakes, new_peers: int) -> float:
    """Extra seconds the first call pays to dial ``new_peers`` peers it had not met (two connections each)."""
    if new_peers <= 0:
        return 0.0
    return _connections(cluster, hs, 2 * new_peers, 2 * new_peers)


def new_peers_on_first_use(cluster: Cluster, small: str) -> dict[str, int]:
    """Peers beyond the ring neighbours that each first use reaches, per rank: the descriptor round in its
    form, the hierarchy (the host's own ranks and two cross-host neighbours), the engine's coordinator (rank 0
    meets everyone: counted for rank 0)."""
    p, local = cluster.ranks, cluster.local_size
    logp = math.ceil(math.log2(p)) if p > 1 else 0
    descriptor = p - 1 if small == "direct" else min(p - 1, 2 * logp)
    return {"descriptor round": max(descriptor - 2, 0),
            "hierarchy": max(local - 1 + (2 if cluster.hosts > 1 else 0) - 2, 0),
            "engine coordinator (rank 0)": max(p - 1 - 2, 0)}
