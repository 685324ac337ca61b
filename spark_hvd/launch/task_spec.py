"""Driver, read by the task: what the driver ships to every task of the barrier stage (inside the task's closure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from collective.config import Config


@dataclass(frozen=True)
class TaskSpec:
    num_proc: int
    secret: bytes                 # per job; authenticates the output channel, rendezvous and mesh
    # "host:port" of the driver's OutputCollector; None: the driver cannot be dialled (Spark Connect), so
    # each task returns its output, events and failure report in its row of the stage (StageOutbox).
    collector_address: str | None
    payload: bytes                # cloudpickle((fn, args, kwargs))
    env: dict[str, str] = field(default_factory=dict)  # extra environment for the children
    nics: tuple[str, ...] | None = None  # interfaces the rendezvous and the mesh may use; None = any
    executable: str | None = None        # the children's Python interpreter; None = the worker's own
    # The driver's Config (and COLLECTIVE_* there) decides both, so one setting covers every listener.
    connect_timeout_s: float = Config.connect_timeout_s
    handshake_timeout_s: float = Config.handshake_timeout_s  # rank 0's rendezvous, per stranger
    exit_grace_s: float = 30.0    # after fn returns, how long its process may take to exit
    # Modules a spare rank child imports ahead of the next run in the same worker (spare_child.py); () none.
    keep_warm: tuple[str, ...] = ()
    # "host:port" of the run's rendezvous store on the driver (driver_rendezvous.py), where the ranks meet;
    # None: they meet through BarrierTaskContext.allGather and rank 0 serves the store.
    rendezvous_address: str | None = None
    # Called with the rank in the task before it reports to the driver that it started; None in every real run.
    # Tests hold a rank here past the start timeout (tests/spark/test_elastic_fencing.py).
    before_start: Callable[[int], None] | None = None

    def __repr__(self) -> str:
        # Never print the secret (Spark logs closures' reprs in some error paths).
        return (f"TaskSpec(num_proc={self.num_proc}, collector_address={self.collector_address!r}, "
                f"payload=<{len(self.payload)} bytes>)")
