"""Which requests every rank has submitted, decided identically on every rank (no MPI here).

Each engine cycle, every rank announces the requests it submitted since the last cycle; all ranks
feed the same announcements, in rank order, into their own ``Table``, so every rank picks the same
ready requests in the same order (first announced anywhere, first run) without a coordinator.
A rank that has joined counts as present for every request; while ranks have joined only allreduces
run (the engine refuses the rest, as the native coordinator does), the joined ranks contributing zeros.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from collective._native import CollectiveKind
from collective.mpi.calls import Call


@dataclass
class Pending:
    calls: dict[int, Call] = field(default_factory=dict)  # rank -> what it submitted under this name
    first_seen: float = field(default_factory=time.monotonic)
    # The engine round that first announced it: the same on every rank, unlike first_seen.
    first_round: int = 0


class Table:
    def __init__(self, size: int) -> None:
        self.size = size
        self.pending: dict[str, Pending] = {}
        self.joined: list[int] = []  # in the order their joins were announced
        self.stopping: set[int] = set()

    def announce(self, rank: int, calls: list[Call], round_number: int = 0) -> None:
        for call in calls:
            if call.kind == CollectiveKind.JOIN:
                if rank not in self.joined:
                    self.joined.append(rank)
                continue
            pending = self.pending.get(call.name)
            if pending is None:
                pending = self.pending[call.name] = Pending(first_round=round_number)
            pending.calls[rank] = call

    def take_ready(self) -> list[tuple[str, dict[int, Call]]]:
        """Removes and returns the requests every rank that has not joined has submitted."""
        active = [r for r in range(self.size) if r not in self.joined]
        ready = [name for name, p in self.pending.items() if p.calls and all(r in p.calls for r in active)]
        return [(name, self.pending.pop(name).calls) for name in ready]

    def take_join(self) -> int | None:
        """Once every rank has joined: the rank that joined last (and the joins are reset)."""
        if len(self.joined) < self.size:
            return None
        last = self.joined[-1]
        self.joined = []
        return last

    def stalled_since(self, shutdown_s: float, now: float) -> int:
        """The latest round whose still-incomplete requests have waited ``shutdown_s`` by this rank's
        clock, or -1. Ranks swap it, and all then expire the same requests (``take_stalled``)."""
        if not shutdown_s:
            return -1
        return max((p.first_round for name, p in self.pending.items()
                    if now - p.first_seen >= shutdown_s and self.missing(name)), default=-1)

    def take_stalled(self, last_round: int) -> list[tuple[str, Pending, list[int]]]:
        """Removes and returns (name, pending, missing ranks) for the incomplete requests first announced
        in ``last_round`` or before: identical on every rank, as the tables are."""
        if last_round < 0:
            return []
        stalled = [(name, p, self.missing(name)) for name, p in self.pending.items() if p.first_round <= last_round]
        stalled = [entry for entry in stalled if entry[2]]
        for name, _, _ in stalled:
            del self.pending[name]
        return stalled

    def missing(self, name: str) -> list[int]:
        """Ranks that have not submitted ``name`` yet (for stall and timeout messages)."""
        pending = self.pending.get(name)
        if pending is None:
            return []
        return [r for r in range(self.size) if r not in pending.calls and r not in self.joined]
