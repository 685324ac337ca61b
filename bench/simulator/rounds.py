"""Bench: one symmetric round of a schedule, and the price of a list of them.

Every rank of our algorithms does the same thing in each step (the ring's step k, a log round's round k), so a
step is described once, for a typical rank, and priced once: a schedule of 2(p-1) ring steps at 4,096 ranks is a
handful of ``Round`` objects, not millions of events.
"""

from __future__ import annotations

from dataclasses import dataclass

from .cluster import Cluster

HEADER_BYTES = 128  # a call descriptor: fixed header, a short name, a small shape (native/algorithms/descriptor.cc)


@dataclass(frozen=True)
class Round:
    """What each rank does in one step, ``count`` times in a row.

    ``messages`` of ``bytes`` each leave a rank at once over ``link`` ("intra" or "inter"); ``egress_bytes`` is
    what crosses one host's NIC in the step (all its ranks together); ``cpu_bytes`` and ``cpu_msgs`` are the
    rank's own copies/reductions and message handlings; ``busy`` ranks per host compete for the cores.
    ``pipelined``: the transfer is cut into chunks so the CPU's reduction overlaps the wire.
    """

    name: str
    count: int
    messages: int
    bytes: float
    link: str
    egress_bytes: float
    cpu_bytes: float
    cpu_msgs: int
    busy: int
    pipelined: bool = True
    working_bytes: float = 0.0  # what a host's ranks touch in all: past the cache, bytes cost more

    def __post_init__(self) -> None:
        if self.link not in ("intra", "inter"):
            raise ValueError(f"round {self.name}: link must be 'intra' or 'inter', not {self.link!r}")
        if self.count < 0 or self.messages < 0 or self.bytes < 0:
            raise ValueError(f"round {self.name}: negative count, messages or bytes")


def wire_time(cluster: Cluster, step: Round) -> float:
    """Seconds the bytes of one step spend on the link, beyond its latency: a flow's own rate or the NIC's
    share, whichever binds."""
    link = cluster.intra if step.link == "intra" else cluster.inter
    flow = step.bytes / link.bytes_per_s
    if step.link == "intra":
        return flow * max(step.messages, 1)
    return max(flow, step.egress_bytes / cluster.nic_bytes_per_s)


def cpu_time(cluster: Cluster, step: Round) -> float:
    """A rank's CPU work in one step, stretched by the ranks that share its host's cores."""
    work = step.cpu_msgs * cluster.cpu_msg_s + step.cpu_bytes * cluster.byte_cost(step.working_bytes)
    return work * cluster.cpu_share(step.busy)


def round_time(cluster: Cluster, step: Round) -> float:
    """Seconds for one step: latency, the wait for a core when they are oversubscribed, then wire and CPU,
    overlapped chunk by chunk when pipelined (the first chunk's CPU work cannot overlap its own transfer)."""
    if step.count == 0 or step.messages == 0:
        return 0.0
    link = cluster.intra if step.link == "intra" else cluster.inter
    wire, cpu = wire_time(cluster, step), cpu_time(cluster, step)
    exposed = 1.0
    if step.pipelined and step.bytes > cluster.pipeline_chunk_bytes:
        exposed = cluster.pipeline_chunk_bytes / step.bytes
    return link.alpha_s + cluster.turn_wait(step.busy) + max(wire, cpu) + min(wire, cpu) * exposed


def schedule_time(cluster: Cluster, rounds: list[Round]) -> float:
    """Seconds for a whole schedule: its rounds run one after another."""
    return sum(step.count * round_time(cluster, step) for step in rounds)


def breakdown(cluster: Cluster, rounds: list[Round]) -> dict[str, float]:
    """Seconds per named part of a schedule (rounds that share a name add up)."""
    parts: dict[str, float] = {}
    for step in rounds:
        parts[step.name] = parts.get(step.name, 0.0) + step.count * round_time(cluster, step)
    return parts
