"""Task: the function each task of the barrier stage runs, in Spark's Python worker.

One task per rank; rank = partition id. The task:
1. connects to the driver's output collector (this is how the driver knows the rank started);
2. starts the child process that will run fn, and sends it fn while the ranks meet;
3. rank 0 starts a rendezvous server; every task contributes its host key to ONE
   BarrierTaskContext.allGather, which also carries rank 0's rendezvous address;
4. hands the child its COLLECTIVE_* environment and RankContext; the child's collective.init()
   meets its peers through rank 0's rendezvous and builds the mesh;
5. relays the child's output, and returns fn's pickled result, or reports the failure and fails.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

from collective.bootstrap import RendezvousServer
from collective.bootstrap.interfaces import mesh_host
from collective.config import Config, default_host_key, format_host_port, parse_host_port
from collective.topology import topology_from_host_keys
from spark_hvd.launch.output_channel import OutputSender
from spark_hvd.launch.rank_child import ChildOutcome, RankChild
from spark_hvd.launch.rank_context import RankContext
from spark_hvd.launch.rank_task import run_task
from spark_hvd.launch.task_spec import TaskSpec

RESULT_DDL = "rank INT, result BINARY"


class BarrierTask:
    """The mapInArrow function: consumes its (one-row) input, runs the rank, yields its result."""

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        # An unread input iterator leaves Spark's Python worker unusable for the next job.
        for _ in batches:
            pass
        rank, result = run_rank(self.spec)
        yield pa.RecordBatch.from_pydict(
            {"rank": [rank], "result": [result]},
            schema=pa.schema([("rank", pa.int32()), ("result", pa.binary())]))


def run_rank(spec: TaskSpec) -> tuple[int, bytes]:
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    rank = ctx.partitionId()

    def prepare() -> tuple[str, ...]:
        _check_stage(ctx, spec)
        return _gpu_addresses(ctx)

    def meet(child: RankChild, gpu_addresses: tuple[str, ...], sender: OutputSender) -> ChildOutcome:
        return _meet_and_wait(ctx, spec, rank, child, gpu_addresses, sender)

    return rank, run_task(spec, rank, prepare, meet)


def _meet_and_wait(ctx: Any, spec: TaskSpec, rank: int, child: RankChild,
                   gpu_addresses: tuple[str, ...], sender: OutputSender) -> ChildOutcome:
    task_addresses = tuple(info.address for info in ctx.getTaskInfos())
    server = None
    try:
        rendezvous = None
        if rank == 0:
            server, rendezvous = _start_rendezvous(spec, task_addresses[0])
        mine = {"host_key": default_host_key(), "rendezvous": rendezvous}
        # The one barrier sync of the launch (each costs about a second in Spark 4.3).
        gathered = [json.loads(message) for message in ctx.allGather(json.dumps(mine))]
        topology = topology_from_host_keys(rank, [peer["host_key"] for peer in gathered])
        context = RankContext(
            rank=rank, size=topology.size, local_rank=topology.local_rank,
            local_size=topology.local_size, cross_rank=topology.cross_rank,
            cross_size=topology.cross_size, task_address=task_addresses[rank],
            task_addresses=task_addresses, gpu_addresses=gpu_addresses,
            stage_id=ctx.stageId(), task_attempt_id=ctx.taskAttemptId())
        child.send_job(Config(rank=rank, size=spec.num_proc, rendezvous=gathered[0]["rendezvous"],
                              secret=spec.secret, nics=spec.nics), context.to_json())
        # Rank 0 keeps serving the rendezvous until its own fn is done: that covers every
        # init() that fn's peers can still make while rank 0 is alive to join them.
        return child.wait_outcome(spec.exit_grace_s, on_failure_report=sender.send_failure)
    finally:
        if server is not None:
            server.stop()


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
