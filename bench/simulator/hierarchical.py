"""Bench: the hierarchical allreduce (native/algorithms/hierarchical_allreduce.cc).

Reduce-scatter within each host, then one allreduce per local rank across hosts, all L of them at once (they
share the host's NIC), then allgather within the host. A segment small enough crosses in one direct round.
"""

from __future__ import annotations

from .cluster import Cluster
from .ring import ring_steps
from .rounds import Round


def cross_host_steps(cluster: Cluster, segment_bytes: float) -> list[Round]:
    """One allreduce of ``segment_bytes`` per local rank across the hosts, L in parallel."""
    hosts, local = cluster.hosts, cluster.local_size
    if hosts < 2:
        return []
    if segment_bytes * (hosts - 1) <= cluster.small_call_bytes:
        return [Round(name="cross-host direct", count=1, messages=hosts - 1, bytes=segment_bytes, link="inter",
                      egress_bytes=local * (hosts - 1) * segment_bytes,
                      cpu_bytes=3 * (hosts - 1) * segment_bytes, cpu_msgs=2 * (hosts - 1), busy=local,
                      pipelined=False, working_bytes=local * hosts * segment_bytes)]
    steps = ring_steps(hosts, segment_bytes, "inter", local, name="cross-host ring")
    # L segment rings run at once: a step puts one chunk per local rank through the host's NIC.
    return [Round(**{**s.__dict__, "egress_bytes": s.egress_bytes * local}) for s in steps]


def local_steps(cluster: Cluster, nbytes: float, phase: str) -> list[Round]:
    """The within-host reduce-scatter or allgather: L-1 ring steps over shared memory, n/L bytes each."""
    local = cluster.local_size
    if local < 2:
        return []
    chunk = nbytes / local
    return [Round(name=f"local {phase}", count=local - 1, messages=1, bytes=chunk, link="intra", egress_bytes=0,
                  cpu_bytes=2 * chunk, cpu_msgs=2, busy=local, working_bytes=local * nbytes)]


def hierarchical_allreduce(cluster: Cluster, nbytes: float) -> list[Round]:
    segment = nbytes / cluster.local_size
    return (local_steps(cluster, nbytes, "reduce-scatter") + cross_host_steps(cluster, segment)
            + local_steps(cluster, nbytes, "allgather"))
