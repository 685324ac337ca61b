"""Rank child: runs fn with torch.distributed's environment set, rank 0 hosting the job's TCPStore.

The master port is never guessed. Rank 0 opens torch's TCPStore on a port the kernel picks and
keeps it open for the whole of fn; it publishes the port in the job's own rendezvous (served by
rank 0's task under Spark, by ``collective.run`` locally), where the other ranks read it. Every
rank's ``init_process_group(init_method="env://")`` then connects to that store, as torchrun's
workers connect to their agent's, so two jobs on one host cannot collide on a port. After fn, rank 0
keeps the store until every rank has finished fn (torchrun's exit barrier does the same).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import Any, Callable

import collective
from collective.bootstrap import RendezvousClient, RendezvousError
from collective.config import Config, parse_host_port
from collective.runtime import current, job_config
from spark_hvd.launch.rank.rank_context import rank_context
from spark_hvd.launch.rank.torch_distributed_env import torch_distributed_env

_KEY_PREFIX = "spark_hvd/torch.distributed"
# torchrun's default exit_barrier_timeout: how long rank 0 keeps the store for slower ranks.
_EXIT_BARRIER_S = 300.0
# How long the store waits for a key, as torch's own default.
_STORE_TIMEOUT = timedelta(minutes=30)


def _with_torch(fn: Callable[..., Any], run_id: str, node_per_task: bool) -> "TorchDistributedCall":
    # Unpickling in the child happens while the ranks meet (the Spark allGather), so importing
    # torch here takes that second or two off the launch instead of adding it after.
    import torch.distributed  # noqa: F401

    return TorchDistributedCall(fn, run_id, node_per_task)


class TorchDistributedCall:
    """fn, called on every rank with torchrun's worker variables in ``os.environ``.

    ``node_per_task``: each rank is a torchrun node of its own (Spark tasks); otherwise the ranks
    of one host form a node (the local launcher). ``run_id`` becomes TORCHELASTIC_RUN_ID.
    """

    def __init__(self, fn: Callable[..., Any], run_id: str, node_per_task: bool) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        self.fn = fn
        self.run_id = run_id
        self.node_per_task = node_per_task

    def __reduce__(self) -> tuple[Any, ...]:
        return _with_torch, (self.fn, self.run_id, self.node_per_task)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch.distributed import TCPStore

        context = rank_context()
        host, port = _rendezvous_address()
        store = None
        with _rendezvous_client(host, port) as client:
            if context.rank == 0:
                # Rank 0's own address, as its mesh peers already dial it (nics honoured); the rendezvous
                # may be the driver's, on another host.
                master_addr = _mesh_host() or client.local_address()
                store = TCPStore(master_addr, 0, is_master=True, wait_for_workers=False,
                                 timeout=_STORE_TIMEOUT)
                master_port = store.port
                client.set(f"{_KEY_PREFIX}/master", f"{master_port} {master_addr}".encode())
            else:
                port_text, master_addr = client.get(f"{_KEY_PREFIX}/master").decode().split(" ", 1)
                master_port = int(port_text)
        os.environ.update(torch_distributed_env(context, master_addr, master_port, self.run_id,
                                                node_per_task=self.node_per_task))
        result = self.fn(*args, **kwargs)
        _exit_barrier(context.rank, context.size, host, port)
        del store  # only now may peers lose it
        return result


def _rendezvous_address() -> tuple[str, int]:
    config = _job_config()
    if config.rendezvous is None or config.secret is None:
        raise RuntimeError("torch_distributed needs the job's rendezvous: run fn with spark_hvd.run or "
                           "spark_hvd.TorchDistributor, which set it")
    return parse_host_port(config.rendezvous)


def _mesh_host() -> str | None:
    """The address this rank published to its mesh peers (None on the MPI backend, which has no mesh)."""
    return getattr(current(), "host", None)


def _job_config() -> Config:
    # The rank child joined the job before fn runs: its Config has the rendezvous and the secret.
    if not collective.is_initialized():
        raise RuntimeError("torch_distributed needs the job's rendezvous: run fn with spark_hvd.run or "
                           "spark_hvd.TorchDistributor, which set it")
    return job_config()


def _rendezvous_client(host: str, port: int) -> RendezvousClient:
    config = _job_config()
    return RendezvousClient(host, port, timeout_s=config.connect_timeout_s, secret=config.secret)


def _exit_barrier(rank: int, size: int, host: str, port: int) -> None:
    """Every rank says it is done; rank 0 waits for them, so its store outlives their use of it."""
    done = [f"{_KEY_PREFIX}/done/{r}" for r in range(1, size)]
    try:
        with _rendezvous_client(host, port) as client:
            if rank != 0:
                client.set(done[rank - 1], b"")
                return
            client.wait(done, _EXIT_BARRIER_S)
    except (OSError, RendezvousError) as e:
        # fn succeeded: a rank that cannot say so (rank 0 already gone), or a rank 0 that stops
        # waiting for one, is not a failure of fn; torchrun goes on in the same way.
        print(f"spark_hvd: rank {rank}: torch.distributed exit barrier: {e}", file=sys.stderr)
