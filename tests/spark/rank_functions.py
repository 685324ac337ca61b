"""Functions the tests run on ranks. conftest registers this module to be pickled by value."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading

import numpy as np

import collective
import spark_hvd


def allreduce_rank_vectors(length: int) -> dict:
    """Every rank contributes [rank, rank, ...]; returns what it saw, for the test to check."""
    total = collective.allreduce(np.full(length, float(collective.rank())), op=collective.Sum)
    return {"rank": collective.rank(), "size": collective.size(), "sum": total.tolist()}


def horovod_style(length: int) -> dict:
    """Calls init() first, as ported Horovod code does; it must find the running job."""
    collective.init()
    return allreduce_rank_vectors(length)


def reinit_with_overrides() -> float:
    """init() with arguments rebuilds the mesh with them, on every rank in step."""
    collective.init(timeout_s=30.0, enable_shm=False)
    uses_shm = collective.size() > 1 and collective.uses_shared_memory(1 - collective.rank())
    return float(collective.allreduce(np.array([1.0]), op=collective.Sum)[0]) + (100 if uses_shm else 0)


def where_am_i() -> dict:
    context = spark_hvd.rank_context()
    total = collective.allreduce(np.array([1.0]), op=collective.Sum)
    return {
        "rank": collective.rank(),
        "context_rank": context.rank,
        "task_address": context.task_address,
        "executor_dir": os.getcwd(),   # standalone executors each run in their own work dir
        "python_parent": os.getppid(),
        "hostname": socket.gethostname(),
        "sum": float(total[0]),
    }


def gpu_view() -> dict:
    context = spark_hvd.rank_context()
    return {
        "rank": context.rank,
        "gpu_addresses": list(context.gpu_addresses),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def chatty(lines: int) -> int:
    for i in range(lines):
        print(f"rank {collective.rank()} line {i}")
    print(f"rank {collective.rank()} to stderr", file=sys.stderr)
    return collective.rank()


def raise_on_rank(bad_rank: int) -> int:
    if collective.rank() == bad_rank:
        print("about to raise")
        raise ValueError(f"boom from rank {bad_rank}")
    # The healthy rank waits in a collective; it must be stopped, not left hanging.
    collective.allreduce(np.ones(4))
    return collective.rank()


def exit_on_rank(bad_rank: int, code: int) -> int:
    if collective.rank() == bad_rank:
        print("about to exit")
        sys.stdout.flush()
        os._exit(code)
    collective.allreduce(np.ones(4))
    return collective.rank()


def block_forever() -> None:
    print(f"pid {os.getpid()}", flush=True)
    threading.Event().wait()


def echo_args(*args, **kwargs) -> tuple:
    return collective.rank(), args, kwargs


def torch_horovod_style() -> list:
    """A ported Horovod PyTorch loop: hvd.init(), broadcast the model, one averaged step."""
    import torch

    import collective.torch as hvd

    hvd.init()
    torch.manual_seed(hvd.rank())  # different initial weights per rank, until the broadcast
    model = torch.nn.Linear(3, 1)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    loss = model(torch.full((4, 3), float(hvd.rank() + 1))).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return [p.detach().flatten().tolist() for p in model.parameters()]


def emit_numbered_events(count: int) -> int:
    """Sends count events; returns how many emit_event accepted."""
    sent = 0
    for i in range(count):
        sent += spark_hvd.emit_event({"rank": collective.rank(), "i": i})
    return sent


def fail_on_rank(mode: str, victim: int) -> int:
    """The victim raises, is SIGKILLed, has its Spark task SIGKILLed under it, or stops; the others keep
    allreducing until they notice."""
    collective.barrier()
    if collective.rank() == victim:
        if mode == "raise":
            raise ValueError(f"rank {victim} gives up")
        # The child's parent is the task process that owns this rank (in Spark's Python worker).
        target = os.getppid() if mode == "kill_task" else os.getpid()
        os.kill(target, signal.SIGSTOP if mode == "sigstop" else signal.SIGKILL)
    while True:
        collective.allreduce(np.ones(16))


def stop_rank_survivors_exit(victim: int) -> int:
    """The victim stops; the others catch the collective error, as many training scripts do, and exit with
    code 3 after the except block (so the SystemExit does not even carry the error as its context)."""
    collective.barrier()
    if collective.rank() == victim:
        os.kill(os.getpid(), signal.SIGSTOP)
    try:
        while True:
            collective.allreduce(np.ones(16))
    except collective.CollectiveError as e:
        print(f"rank {collective.rank()} gives up: {e}", flush=True)
    sys.exit(3)


def process_state(marker: str) -> dict:
    """What a rank's process holds when fn starts: whether the spare imported `wave` before it (nothing in
    the launch imports it), who started it, what earlier jobs left (a marker module, an env variable), a
    draw from numpy's global generator (a fresh process seeds it afresh), and the job itself.
    Then leaves its own marker, which no later job may see."""
    seen = {"rank": collective.rank(), "size": collective.size(), "pid": os.getpid(), "parent": parent_process(),
            "draw": float(np.random.random()),
            "preloaded": "wave" in sys.modules, "markers": sorted(m for m in sys.modules if m.startswith("marker_")),
            "env_marker": os.environ.get("SPARK_HVD_TEST_MARKER"),
            "sum": float(collective.allreduce(np.array([1.0]), op=collective.Sum)[0])}
    sys.modules[f"marker_{marker}"] = sys.modules["os"]
    os.environ["SPARK_HVD_TEST_MARKER"] = marker
    return seen


def parent_process() -> tuple[int, str]:
    """This process's parent: its pid, and which program it is (a Spark worker, or a keep_warm zygote)."""
    parent = os.getppid()
    with open(f"/proc/{parent}/cmdline", "rb") as cmdline:
        return parent, "zygote" if b"spark_hvd.launch.rank.child_main" in cmdline.read() else "task"


def environment_of(name: str) -> tuple:
    """Whether the spare imported `wave` before this job, and the variable ``name`` as this process sees it."""
    return "wave" in sys.modules, os.environ.get(name)


def loaded_and_parent(module: str) -> tuple:
    """Whether ``module`` was imported before this job (by a spare), and who started this process."""
    return module in sys.modules, parent_process()[1]



def failing_prestart(executable, run_env, modules) -> int:
    """Stands in for rank_task.prestart_zygote in a warm-up stage's tasks: fails as a broken warm-up would."""
    raise RuntimeError("injected failure of the warm-up task")


def available_devices() -> dict:
    from spark_hvd.task import get_available_devices

    devices = get_available_devices()
    if devices:
        # The devices must be addressable in this process, as Horovod scripts pick theirs with them.
        visible = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
        assert all(int(d) < len(visible) for d in devices), (devices, visible)
    return {"devices": devices, "gpu_addresses": list(spark_hvd.rank_context().gpu_addresses),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
