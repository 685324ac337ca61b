"""Training and probing functions the TorchDistributor tests run on ranks (pickled by value), and
the single-process reference their final weights are compared with.

DDP and FSDP (CPU, gloo) train a small float64 MLP with SGD; each of the W ranks takes its 1/W of
every global batch, so averaging the gradients over the ranks reproduces one process training on
the whole batch, up to float rounding.
"""

from __future__ import annotations

import atexit
import os
import select
import sys
from typing import Any

STEPS = 4
GLOBAL_BATCH = 8
FEATURES, HIDDEN, OUTPUTS = 6, 16, 3
LEARNING_RATE = 0.1
TORCHRUN_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                      "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_RUN_ID",
                      "TORCHELASTIC_USE_AGENT_STORE", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")


def make_model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, OUTPUTS)).double()


def global_batch(step: int) -> tuple[Any, Any]:
    import torch

    g = torch.Generator().manual_seed(1000 + step)
    return (torch.randn(GLOBAL_BATCH, FEATURES, generator=g, dtype=torch.float64),
            torch.randn(GLOBAL_BATCH, OUTPUTS, generator=g, dtype=torch.float64))


def _train(model: Any, steps: int, rank: int, world_size: int) -> None:
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    for step in range(steps):
        x, y = global_batch(step)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x.chunk(world_size)[rank]), y.chunk(world_size)[rank]).backward()
        optimizer.step()


def _weights(state: dict) -> dict[str, list[float]]:
    return {name: tensor.detach().flatten().tolist() for name, tensor in state.items()}


def train_single(steps: int = STEPS) -> dict[str, list[float]]:
    model = make_model()
    _train(model, steps, 0, 1)
    return _weights(model.state_dict())


def train_ddp(steps: int = STEPS) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")   # env://, from the launcher's variables
    model = make_model()
    _train(DistributedDataParallel(model), steps, dist.get_rank(), dist.get_world_size())
    result = {"weights": _weights(model.state_dict()), "rank": dist.get_rank(),
              "world_size": dist.get_world_size()}
    dist.destroy_process_group()
    return result


def train_fsdp(steps: int = STEPS) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    model = make_model()
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    # Each rank holds only its shard of every parameter: the proof that FSDP is sharding.
    local_numel = sum(p.to_local().numel() for p in model.parameters())
    total_numel = sum(p.numel() for p in model.parameters())
    _train(model, steps, dist.get_rank(), dist.get_world_size())
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    result = {"weights": _weights(state), "rank": dist.get_rank(), "world_size": dist.get_world_size(),
              "local_numel": local_numel, "total_numel": total_numel}
    dist.destroy_process_group()
    return result


def torch_environment() -> dict[str, Any]:
    """What torch.distributed sees before init_process_group, and that the master port is live."""
    import socket

    import torch.distributed as dist

    env = {name: os.environ.get(name) for name in TORCHRUN_VARIABLES}
    # Rank 0 already holds the store open on MASTER_PORT: a port that was only picked, then
    # released, would refuse this connection.
    with socket.create_connection((env["MASTER_ADDR"], int(env["MASTER_PORT"])), timeout=10):
        pass
    env["is_torchelastic_launched"] = dist.is_torchelastic_launched()
    dist.init_process_group("gloo")
    env["dist_rank"], env["dist_world_size"] = dist.get_rank(), dist.get_world_size()
    # Gloo's mesh can be complete on one rank while the other still finishes its handshake: a rank
    # that destroyed the group at once would close the connection under its peer (seen under load).
    dist.barrier()
    dist.destroy_process_group()
    return env


def hold_master_port_until_released(address: tuple[str, int]) -> str:
    """Rank 0 tells the test its MASTER_PORT, then keeps fn (and so its store) running until the
    test answers, so that two jobs' stores are certainly open at the same time."""
    import socket

    port = os.environ["MASTER_PORT"]
    if os.environ["RANK"] == "0":
        with socket.create_connection(address, timeout=120) as test:
            test.sendall(port.encode() + b"\n")
            test.recv(1)
    return port


def ddp_then_kill_rank(victim: int) -> int:
    """The victim SIGKILLs itself once DDP is built; its peer then waits in a DDP allreduce and
    gets gloo's "Connection closed by peer"."""
    import signal

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    model = DistributedDataParallel(make_model())
    if dist.get_rank() == victim:
        print("about to die", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    x, y = global_batch(0)
    torch.nn.functional.mse_loss(model(x), y).backward()
    return dist.get_rank()


def raise_after_init_on_rank(bad_rank: int) -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == bad_rank:
        print("about to raise", flush=True)
        raise ValueError(f"boom from rank {bad_rank}")
    dist.all_reduce(torch.ones(3))
    return dist.get_rank()


def return_then_abort_at_exit(aborting_rank: int) -> str:
    """The aborting rank returns at once and then dies of SIGABRT in interpreter teardown, as torch
    2.13 sometimes does after DDP over gloo; the other rank returns only after that process is gone."""
    import numpy as np

    import collective

    pids = collective.allgather(np.array([os.getpid()], dtype=np.int64)).tolist()
    if collective.rank() == aborting_rank:
        atexit.register(os.abort)
        return f"rank {aborting_rank} returned"
    fd = os.pidfd_open(pids[aborting_rank])
    try:
        exited, _, _ = select.select([fd], [], [], 60)
    finally:
        os.close(fd)
    return f"rank {collective.rank()} outlived rank {aborting_rank}: {bool(exited)}"


def visible_devices() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                    "CUDA_VISIBLE_DEVICES")}


def chatty(lines: int) -> int:
    rank = int(os.environ["RANK"])
    for i in range(lines):
        print(f"rank {rank} line {i}")
    print(f"rank {rank} to stderr", file=sys.stderr)
    return rank


def report_progress(steps: int) -> int:
    import spark_hvd

    rank = int(os.environ["RANK"])
    for step in range(steps):
        spark_hvd.emit_event({"rank": rank, "step": step})
    return rank
