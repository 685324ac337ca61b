"""The MPI engine's timeline: the native engine's Chrome-trace writer (native/engine/timeline.*, through
the binding), so both engines write one file format with the same phase names.

Only the job's rank 0 writes, as on the ring. ``on`` is read on the engine's hot path: while no timeline
runs, the engine takes no clock readings at all.
"""

from __future__ import annotations

import functools

from collective import _native
from collective._native import CollectiveKind

# The fusion buffer's phases, named as the native engine names them.
MEMCPY_IN, MEMCPY_OUT, QUEUE = "MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER", "QUEUE"

now_ns = _native.Timeline.now_ns  # the writer's clock


@functools.lru_cache(maxsize=None)
def phase_of(kind: int) -> str:
    """ALLREDUCE, BROADCAST...: the phase a collective of ``kind`` is recorded under."""
    return _native.collective_phase(CollectiveKind(kind))


@functools.lru_cache(maxsize=None)
def negotiate_phase_of(kind: int) -> str:
    """NEGOTIATE_ALLREDUCE...: the phase a collective of ``kind`` waits for its peers under."""
    return _native.negotiate_phase(CollectiveKind(kind))


class EngineTimeline:
    def __init__(self, rank: int, path: str | None) -> None:
        self._rank = rank
        self._writer = _native.Timeline()
        self.on = False
        if path:
            self.start(path, False)

    def start(self, path: str, mark_cycles: bool) -> None:
        """Starts writing to ``path`` on rank 0 (replacing the file; others record nothing)."""
        if self._rank == 0:
            self._writer.open(path, 0, mark_cycles)
            self.on = True

    def stop(self) -> None:
        self.on = False
        self._writer.close()

    def phase(self, tensor: str, phase: str, start_ns: int, end_ns: int, detail: str = "") -> None:
        self._writer.phase(tensor, phase, start_ns, end_ns, detail)

    def cycle_start(self) -> None:
        self._writer.cycle_start()
