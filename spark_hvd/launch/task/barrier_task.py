"""Task: the function each task of the barrier stage runs, in Spark's Python worker.

One task per rank; rank = partition id. The task:
1. connects to the driver's output collector (this is how the driver knows the rank started);
2. starts the child process that will run fn, and sends it fn while the ranks meet;
3. publishes its host key at the rendezvous store the driver serves for the run, and reads its
   peers' (driver_rendezvous.py); under Spark Connect, where the driver cannot be dialled, or with
   nics, rank 0 starts the store instead and every task contributes its host key to ONE
   BarrierTaskContext.allGather, which also carries rank 0's rendezvous address;
4. hands the child its Config and RankContext; the child's collective.init() meets its peers
   at that store and builds the mesh;
5. relays the child's output, and returns fn's pickled result, or reports the failure and fails.

Under Spark Connect the driver cannot be dialled (TaskSpec.collector_address is None): step 1 is
skipped, and the output, events and failure report go into a StageOutbox that leaves in the task's
row (the ``outbox`` column). A rank that fails after the ranks have met then returns its row instead
of failing the task, since a failed barrier task would take every row of the stage with it.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterator

from collective.bootstrap import RendezvousServer
from collective.bootstrap.interfaces import mesh_host
from collective.config import Config, default_host_key, format_host_port, parse_host_port
from collective.topology import topology_from_host_keys
from spark_hvd.errors import RankFailure
from spark_hvd.launch.driver_rendezvous import exchange_host_keys
from spark_hvd.launch.task.rank_child import ChildOutcome, RankChild
from spark_hvd.launch.rank.rank_context import RankContext
from spark_hvd.launch.task.rank_task import Sender, run_task
from spark_hvd.launch.task.stage_outbox import StageOutbox
from spark_hvd.launch.task_spec import TaskSpec

# result: fn's pickled return value (null when the rank failed); outbox: StageOutbox bytes, or null
# when the rank reported to the driver's collector directly.
RESULT_DDL = "rank INT, result BINARY, outbox BINARY"


class BarrierTask:
    """The mapInArrow function: consumes its (one-row) input, runs the rank, yields its result."""

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        # An unread input iterator leaves Spark's Python worker unusable for the next job.
        for _ in batches:
            pass
        outbox = StageOutbox() if self.spec.collector_address is None else None
        rank, result = run_rank(self.spec, outbox)
        yield pa.RecordBatch.from_pydict(
            {"rank": [rank], "result": [result], "outbox": [outbox.to_bytes() if outbox is not None else None]},
            schema=pa.schema([("rank", pa.int32()), ("result", pa.binary()), ("outbox", pa.binary())]))


def run_rank(spec: TaskSpec, outbox: StageOutbox | None = None) -> tuple[int, bytes | None]:
    """(rank, fn's pickled result); with an outbox, a failure after the ranks met gives (rank, None)."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    rank = ctx.partitionId()
    met = []   # set once this task has passed the stage's one allGather

    def meet(child: RankChild, gpu_addresses: tuple[str, ...], sender: Sender) -> ChildOutcome:
        return _meet_and_wait(ctx, spec, rank, child, gpu_addresses, sender, lambda: met.append(True))

    def prepare() -> tuple[str, ...]:
        _check_stage(ctx, spec)
        return _gpu_addresses(ctx)

    try:
        return rank, run_task(spec, rank, prepare, meet, outbox=outbox)
    except Exception:
        # Reported into the outbox already. Before the allGather, failing the task is the only way to
        # free the peers waiting in it (Spark then reports this task's error text); after it, the row
        # carries the report, and the peers end on their own when the mesh loses this rank.
        if outbox is None or not met:
            raise
        return rank, None


def _meet_and_wait(ctx: Any, spec: TaskSpec, rank: int, child: RankChild, gpu_addresses: tuple[str, ...],
                   sender: Sender, on_met: Callable[[], None]) -> ChildOutcome:
    task_addresses = tuple(info.address for info in ctx.getTaskInfos())
    server = None
    try:
        if spec.rendezvous_address is not None:
            # The driver serves the store (driver_rendezvous.py): the ranks meet without a barrier sync.
            rendezvous = spec.rendezvous_address
            host_keys = exchange_host_keys(rendezvous, spec.secret, rank, spec.num_proc, default_host_key(),
                                           spec.connect_timeout_s)
        else:
            own_rendezvous = None
            if rank == 0:
                server, own_rendezvous = _start_rendezvous(spec, task_addresses[0])
            mine = {"host_key": default_host_key(), "rendezvous": own_rendezvous}
            # The one barrier sync of the launch (each costs about a second in Spark 4.3).
            gathered = [json.loads(message) for message in ctx.allGather(json.dumps(mine))]
            rendezvous, host_keys = gathered[0]["rendezvous"], [peer["host_key"] for peer in gathered]
        on_met()
        topology = topology_from_host_keys(rank, host_keys)
        context = RankContext(
            rank=rank, size=topology.size, local_rank=topology.local_rank,
            local_size=topology.local_size, cross_rank=topology.cross_rank,
            cross_size=topology.cross_size, task_address=task_addresses[rank],
            task_addresses=task_addresses, gpu_addresses=gpu_addresses,
            stage_id=ctx.stageId(), task_attempt_id=ctx.taskAttemptId())
        child.send_job(Config(rank=rank, size=spec.num_proc, rendezvous=rendezvous,
                              secret=spec.secret, nics=spec.nics), context.to_json())
        # Rank 0 keeps serving the rendezvous until its own fn is done: that covers every
        # init() that fn's peers can still make while rank 0 is alive to join them.
        return child.wait_outcome(spec.exit_grace_s, on_failure_report=lambda f: _report(f, child, sender))
    finally:
        if server is not None:
            server.stop()


def _report(failure: RankFailure, child: RankChild, sender: Sender) -> None:
    sender.send_failure(failure)
    if not sender.driver_listening:
        # No driver will cancel the stage on hearing this: stop the rank now, as that cancel would, so
        # that its peers see it leave instead of waiting on it (its output was flushed before the report).
        child.kill()


def _start_rendezvous(spec: TaskSpec, task_address: str) -> tuple[RendezvousServer, str]:
    """Rank 0's rendezvous server, and the address its peers dial. Requests must carry the job secret."""
    task_host = parse_host_port(task_address)[0]
    # Listen where peers dial: the host this executor advertises to Spark (the mesh's own address),
    # or with nics the named interfaces' address; never every interface.
    host = mesh_host(None, spec.nics or (), task_host)
    server = RendezvousServer(host, 0, secret=spec.secret, handshake_timeout_s=spec.handshake_timeout_s)
    server.start()
    return server, format_host_port(host, server.address[1])


def _check_stage(ctx: Any, spec: TaskSpec) -> None:
    size = len(ctx.getTaskInfos())
    if size != spec.num_proc:
        raise RuntimeError(f"the barrier stage has {size} tasks, expected num_proc={spec.num_proc}")
    if ctx.attemptNumber() > 0:
        # A retried rank would rejoin peers that have moved on; fail the run instead.
        raise RuntimeError(f"this is attempt {ctx.attemptNumber()} of the task; spark_hvd.run "
                           "does not retry ranks")


def _gpu_addresses(ctx: Any) -> tuple[str, ...]:
    gpu = ctx.resources().get("gpu")
    return tuple(gpu.addresses) if gpu is not None else ()
