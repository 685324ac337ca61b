"""Bench: the machines a schedule runs on: links, hosts, cores, and the presets the report uses."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

GBIT = 1e9 / 8  # bytes per second in one Gbit/s


@dataclass(frozen=True)
class Link:
    """A kind of connection between two ranks: startup latency and bandwidth of one flow."""

    alpha_s: float
    bytes_per_s: float

    def beta(self) -> float:
        """Seconds per byte: the alpha-beta model's beta."""
        return 1.0 / self.bytes_per_s


@dataclass(frozen=True)
class Cluster:
    """``ranks`` ranks, ``ranks_per_host`` on each host (host-ordered), sharing ``cores_per_host`` cores.

    ``intra`` joins ranks of one host (shared memory, or NCCL for GPUs), ``inter`` ranks on different hosts (our
    TCP); ``nic_bytes_per_s`` is one host's network link, shared by all its flows at once. ``cpu_msg_s`` is the
    CPU one message costs a rank (system calls, polling, a scheduler wake-up); ``cpu_byte_s`` the CPU per byte
    a rank copies or reduces (shm copies and TCP's kernel copies are CPU work, not wire time).
    """

    ranks: int
    ranks_per_host: int
    cores_per_host: float
    intra: Link
    inter: Link
    nic_bytes_per_s: float
    cpu_msg_s: float
    cpu_byte_s: float
    call_s: float = 0.0  # fixed cost of one collective call (Python, the call's setup), CPU
    wait_turn_s: float = 0.0  # per round and per rank ahead in the run queue, once the cores are oversubscribed
    cache_bytes: float = float("inf")  # a host's shared last-level cache
    cpu_byte_mem_s: float | None = None  # cpu_byte_s once a host's working set spills out of the cache
    pipeline_chunk_bytes: int = 1 << 20  # native/transport/mesh.h: tcp_chunk_bytes
    small_call_bytes: int = 64 << 10  # native/algorithms/collective_op.h: kSmallCallBytes

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.ranks_per_host < 1 or self.cores_per_host <= 0:
            raise ValueError(f"ranks, ranks_per_host and cores_per_host must be positive: {self}")

    @property
    def hosts(self) -> int:
        return math.ceil(self.ranks / self.ranks_per_host)

    @property
    def local_size(self) -> int:
        """Ranks on one host (the last host may hold fewer; the model treats every host as full)."""
        return min(self.ranks_per_host, self.ranks)

    def cpu_share(self, busy_ranks_per_host: int) -> float:
        """How many times slower a rank's CPU work runs when ``busy_ranks_per_host`` ranks share the cores."""
        return max(1.0, busy_ranks_per_host / self.cores_per_host)

    def byte_cost(self, working_bytes: float) -> float:
        """CPU seconds per byte for a host whose ranks touch ``working_bytes`` in all."""
        if self.cpu_byte_mem_s is not None and working_bytes > self.cache_bytes:
            return self.cpu_byte_mem_s
        return self.cpu_byte_s

    def turn_wait(self, busy_ranks_per_host: int) -> float:
        """Seconds a round waits for the ranks it depends on to get a core: none until the cores are
        oversubscribed, then a turn for each rank queued ahead."""
        if busy_ranks_per_host <= self.cores_per_host:
            return 0.0
        return self.wait_turn_s * (busy_ranks_per_host / self.cores_per_host - 1.0)

    def with_ranks(self, ranks: int) -> "Cluster":
        return replace(self, ranks=ranks)
