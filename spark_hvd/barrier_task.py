"""The function each task of the barrier stage runs, in Spark's Python worker.

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
import os
import sys
import threading
import traceback
from typing import Any, Iterator

from collective.bootstrap import RendezvousServer
from collective.bootstrap.interfaces import mesh_host
from collective.config import (
    default_host_key,
    env_for_rank,
    format_host_port,
    inherited_environ,
    parse_host_port,
)
from collective.topology import topology_from_host_keys
from spark_hvd.errors import RankFailure
from spark_hvd.gpus import CUDA_VISIBLE_DEVICES, visible_devices
from spark_hvd.output_channel import OutputSender
from spark_hvd.rank_child import ChildOutcome, RankChild
from spark_hvd.rank_context import RankContext
from spark_hvd.task_spec import TaskSpec

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
    driver_gone = threading.Event()
    child: RankChild | None = None

    def stop_child() -> None:
        driver_gone.set()
        if child is not None:
            child.kill()

    sender = OutputSender.connect(spec.collector_address, spec.secret, rank,
                                  spec.connect_timeout_s, stop_child)
    try:
        try:
            _check_stage(ctx, spec)
            gpu_addresses = _gpu_addresses(ctx)
            child = RankChild(rank, _child_env(spec, gpu_addresses), sender.send_line, sender.send_event,
                              executable=spec.executable)
            if driver_gone.is_set():
                child.kill()
            child.send_payload_in_background(spec.payload)
            outcome = _meet_and_wait(ctx, spec, rank, child, gpu_addresses, sender)
        except Exception as e:
            # The task itself failed (not fn): report it like a rank failure, then let Spark know.
            if not driver_gone.is_set():
                sender.send_failure(RankFailure(rank, f"its Spark task failed: {type(e).__name__}: {e}",
                                                traceback=traceback.format_exc()))
            raise
        finally:
            if child is not None:
                child.close()
        return rank, _result_or_raise(outcome, sender, driver_gone.is_set())
    finally:
        sender.close()


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
        child.send_job(env_for_rank(rank, spec.num_proc, gathered[0]["rendezvous"], spec.secret,
                                    nics=spec.nics),
                       context.to_json())
        # Rank 0 keeps serving the rendezvous until its own fn is done: that covers every
        # init() that fn's peers can still make while rank 0 is alive to join them.
        return child.wait_outcome(spec.exit_grace_s, on_failure_report=sender.send_failure)
    finally:
        if server is not None:
            server.stop()


def _start_rendezvous(spec: TaskSpec, task_address: str) -> tuple[RendezvousServer, str]:
    """Rank 0's rendezvous server, and the address its peers dial. Requests must carry the job secret."""
    task_host = parse_host_port(task_address)[0]
    if spec.nics:
        # Only the named interfaces may carry the job's traffic, this server's included.
        host = mesh_host(None, spec.nics, task_host)
        server = RendezvousServer(host, 0, secret=spec.secret)
    else:
        # All interfaces: peers reach it by the executor's advertised host name, whatever
        # address that resolves to on their side.
        host = task_host
        server = RendezvousServer("0.0.0.0", 0, secret=spec.secret)
    server.start()
    return server, format_host_port(host, server.address[1])


def _result_or_raise(outcome: ChildOutcome, sender: OutputSender, driver_gone: bool) -> bytes:
    if outcome.failure is None and outcome.result is not None and not driver_gone:
        if outcome.returncode != 0:
            sender.send_notice(f"fn returned, but its process then exited with status {outcome.returncode}")
        return outcome.result
    if driver_gone:
        raise RuntimeError(f"spark_hvd rank {outcome.rank} stopped: the driver ended the job")
    failure = outcome.failure
    assert failure is not None
    if not outcome.reported:
        # It died without a report; reports were sent as soon as they were read (wait_outcome).
        sender.send_failure(failure)
    raise RuntimeError(f"spark_hvd rank {failure.rank} failed: {failure.summary}")


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


def _child_env(spec: TaskSpec, gpu_addresses: tuple[str, ...]) -> dict[str, str]:
    env = inherited_environ()
    env["PYTHONPATH"] = _child_pythonpath(env.get("PYTHONPATH"))
    env["PYTHONUNBUFFERED"] = "1"
    if gpu_addresses:
        env[CUDA_VISIBLE_DEVICES] = visible_devices(gpu_addresses, env.get(CUDA_VISIBLE_DEVICES))
    env.update(spec.env)
    return env


def _child_pythonpath(inherited: str | None) -> str:
    """Lets the child import what this worker can, including files shipped with addPyFile.

    Only the entries a fresh interpreter would not find by itself: listing the interpreter's own
    stdlib or site-packages here would put site-packages ahead of the stdlib in the child.
    """
    own_roots = {os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    entries = [p for p in (inherited or "").split(os.pathsep) if p]
    for path in sys.path:
        if path and not any((os.path.realpath(path) + os.sep).startswith(root) for root in own_roots):
            entries.append(path)
    return os.pathsep.join(dict.fromkeys(entries))
