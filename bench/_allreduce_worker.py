"""One rank of the allreduce benchmark (see bench/allreduce.py, which starts it).

    python _allreduce_worker.py --impl {ours-shm,ours-tcp,ours-engine,ours-mpi,ours-mpi-engine,gloo,mpi}
        --sizes 4096 ... [--target-s S]

Every implementation is measured by the same loop; a backend only supplies the in-place
allreduce, a barrier and a way to agree on a number. Each rank prints one line per size:
``@@allreduce {json}``. The marker lets the driver find the line whatever prefix a launcher
adds (collective.run prepends ``[rank]: ``) and ignore any other output.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

MARKER = "@@allreduce "
# Warm-up covers at least this many bytes (and 3..200 calls): enough to fault in pages, grow
# internal buffers and settle the iteration-count estimate without costing seconds at 256 MiB.
_WARMUP_BYTES = 32 << 20
# Timed calls between two "shall we stop?" agreements: rare enough not to disturb the loop.
_BLOCK_S = 0.1


class Backend:
    """What the timing loop needs from an implementation."""

    name = "?"
    rank = 0
    size = 1

    def prepare(self, buf: np.ndarray) -> Callable[[], None]:
        """Returns a closure doing one in-place SUM allreduce of ``buf`` (wrapping done once, here)."""
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError

    def agree_max(self, value: float) -> float:
        """The maximum of ``value`` over ranks, so every rank runs the same number of iterations."""
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


class Ours(Backend):
    def __init__(self, shm: bool, mixed: bool = False) -> None:
        import collective as hvd

        self.hvd = hvd
        self.name = "ours-shm" if shm else "ours-tcp"
        hvd.init(enable_shm=shm)
        self.rank, self.size = hvd.rank(), hvd.size()
        # Refuse to report shm numbers measured over tcp (or the reverse).
        used = [hvd.uses_shared_memory(p) for p in range(self.size) if p != self.rank]
        # "ours" (bench/multihost.py): shm within a host and tcp across, as the topology decides.
        if not mixed and any(u != shm for u in used):
            raise RuntimeError(f"{self.name}: uses_shared_memory per peer is {used}, expected all {shm}")

    def prepare(self, buf: np.ndarray) -> Callable[[], None]:
        hvd = self.hvd
        return lambda: hvd.allreduce_(buf, op=hvd.Sum)

    def barrier(self) -> None:
        self.hvd.barrier()

    def agree_max(self, value: float) -> float:
        box = np.array([value], dtype=np.float64)
        self.hvd.allreduce_(box, op=self.hvd.Max)
        return float(box[0])

    def close(self) -> None:
        self.hvd.shutdown()


class OursThroughEngine(Ours):
    """Ours over shared memory, each call submitted to the background engine and waited for, as
    collective.torch's and collective.tensorflow's calls go: adds the engine's negotiation to the data path."""

    def __init__(self) -> None:
        from collective._native import CollectiveKind
        from collective.runtime import start_engine

        super().__init__(shm=True)
        self.name = "ours-engine"
        self.engine = start_engine()
        self.kind = CollectiveKind.ALLREDUCE

    def prepare(self, buf: np.ndarray) -> Callable[[], None]:
        engine, kind, name, op = self.engine, self.kind, f"bench.{buf.nbytes}", self.hvd.Sum
        return lambda: engine.wait(engine.submit(kind, name, buf, op=op))


class OursOnLayout(Ours):
    """Ours on emulated hosts: each rank takes its host key from ``layout`` (one host name per rank), so
    same-host pairs use shared memory and the others TCP; the allreduce is forced flat or hierarchical."""

    def __init__(self, layout: list[str], hierarchical: bool) -> None:
        import collective as hvd
        from collective.config import config_from_env

        self.hvd = hvd
        self.name = "ours-hier" if hierarchical else "ours-flat"
        rank = config_from_env().rank
        if rank is None or len(layout) <= rank:
            raise RuntimeError(f"{self.name}: --layout names {len(layout)} hosts, not one for rank {rank}")
        hvd.init(host_key=f"bench-{layout[rank]}", hierarchical_allreduce=hierarchical)
        self.rank, self.size = hvd.rank(), hvd.size()
        used = [hvd.uses_shared_memory(p) for p in range(self.size) if p != self.rank]
        expected = [layout[p] == layout[rank] for p in range(self.size) if p != self.rank]
        if used != expected:
            raise RuntimeError(f"{self.name}: uses_shared_memory per peer is {used}, expected {expected}")


class OursOverMpi(Ours):
    """Ours with MPI as the data path (collective.init(backend="mpi") under mpiexec): direct calls, or
    through the background engine (as collective.torch's calls go)."""

    def __init__(self, engine: bool) -> None:
        import collective as hvd
        from collective.runtime import start_engine

        self.hvd = hvd
        self.name = "ours-mpi-engine" if engine else "ours-mpi"
        hvd.init(backend="mpi")
        if engine:
            start_engine()
        self.rank, self.size = hvd.rank(), hvd.size()


class Gloo(Backend):
    """torch.distributed/gloo; rank, world size and address come from env:// (set by the driver)."""

    def __init__(self) -> None:
        import datetime

        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.name = "gloo"
        # A dead peer should fail the job well within the driver's own deadline.
        dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def prepare(self, buf: np.ndarray) -> Callable[[], None]:
        tensor = self.torch.from_numpy(buf)  # shares buf's memory, so the check below sees the result
        return lambda: self.dist.all_reduce(tensor)

    def barrier(self) -> None:
        self.dist.barrier()

    def agree_max(self, value: float) -> float:
        box = self.torch.tensor([value], dtype=self.torch.float64)
        self.dist.all_reduce(box, op=self.dist.ReduceOp.MAX)
        return float(box[0])

    def info(self) -> dict[str, Any]:
        return {"torch": self.torch.__version__}

    def close(self) -> None:
        self.dist.destroy_process_group()


class Mpi(Backend):
    """mpi4py on whatever transport mpiexec's --mca options selected."""

    def __init__(self) -> None:
        from mpi4py import MPI

        self.MPI = MPI
        self.name = "mpi"
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def prepare(self, buf: np.ndarray) -> Callable[[], None]:
        comm, MPI = self.comm, self.MPI
        return lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

    def barrier(self) -> None:
        self.comm.Barrier()

    def agree_max(self, value: float) -> float:
        return float(self.comm.allreduce(value, op=self.MPI.MAX))

    def info(self) -> dict[str, Any]:
        version = self.MPI.Get_library_version().replace("\x00", "").strip()
        return {"mpi_library": version.splitlines()[0]}


def make_backend(impl: str, layout: list[str]) -> Backend:
    if impl in ("ours-shm", "ours-tcp"):
        return Ours(shm=impl == "ours-shm")
    if impl == "ours-engine":
        return OursThroughEngine()
    if impl in ("ours-flat", "ours-hier"):
        return OursOnLayout(layout, hierarchical=impl == "ours-hier")
    if impl == "ours":
        return Ours(shm=True, mixed=True)
    if impl in ("ours-mpi", "ours-mpi-engine"):
        return OursOverMpi(engine=impl == "ours-mpi-engine")
    if impl == "gloo":
        return Gloo()
    if impl == "mpi":
        return Mpi()
    raise ValueError(f"unknown --impl {impl!r}")


def measure(backend: Backend, nbytes: int, target_s: float, min_iters: int, max_iters: int) -> dict[str, Any]:
    """Times in-place float32 SUM allreduce of ``nbytes``; returns this rank's statistics."""
    p = backend.size
    buf = np.empty(nbytes // 4, dtype=np.float32)
    buf.fill(backend.rank + 1)  # also faults every page in before anything is timed
    run = backend.prepare(buf)
    # First call doubles as a correctness check: sum of 1..p is exact in float32.
    run()
    correct = bool(np.all(buf == p * (p + 1) / 2))
    # Zeros stay zero under repeated SUM, so no inf/denormal can creep into later iterations.
    buf.fill(0.0)

    warmup = min(200, max(3, math.ceil(_WARMUP_BYTES / nbytes)))
    backend.barrier()
    start = time.perf_counter()
    for _ in range(warmup):
        run()
    estimate = backend.agree_max((time.perf_counter() - start) / warmup)
    # Ranks must run the same number of calls, so they agree after each block whether to stop.
    # Stopping on elapsed time (not a count fixed up front) keeps each cell near target_s even
    # when the warm-up estimate was optimistic, e.g. because another process stole a core.
    block = max(1, min(max_iters, math.ceil(_BLOCK_S / max(estimate, 1e-9))))

    times: list[float] = []
    backend.barrier()  # start the timed loop together; later skew is absorbed by the collective itself
    loop_start = time.perf_counter()
    cpu_start = time.process_time()  # every thread of this process: gloo's and the engine's too
    while True:
        for _ in range(min(block, max_iters - len(times))):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        finished = len(times) >= max_iters or (
            len(times) >= min_iters and time.perf_counter() - loop_start >= target_s)
        if backend.agree_max(1.0 if finished else 0.0) > 0.0:  # untimed; stop once any rank is done
            break
    iters = len(times)
    cpu_s = time.process_time() - cpu_start
    times.sort()
    return {
        "impl": backend.name, "ranks": p, "rank": backend.rank, "bytes": nbytes,
        "iters": iters, "warmup": warmup, "correct": correct,
        "median_s": statistics.median(times), "mean_s": statistics.fmean(times),
        "min_s": times[0], "p10_s": times[int(0.1 * (iters - 1))],
        "p90_s": times[int(0.9 * (iters - 1))], "max_s": times[-1],
        # CPU per call, including the few untimed agreements between blocks.
        "cpu_s_per_call": cpu_s / iters,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", required=True, choices=["ours", "ours-shm", "ours-tcp", "ours-engine", "ours-flat",
                                                            "ours-hier", "ours-mpi", "ours-mpi-engine", "gloo", "mpi"])
    parser.add_argument("--sizes", type=int, nargs="+", required=True, help="message sizes in bytes")
    parser.add_argument("--target-s", type=float, default=1.0, help="aim for this much timed work per size")
    parser.add_argument("--min-iters", type=int, default=5)
    parser.add_argument("--max-iters", type=int, default=100_000)
    parser.add_argument("--label", default=None, help="name reported for this implementation")
    parser.add_argument("--pin", action="store_true", help="bind this rank to one CPU: rank mod the usable CPUs")
    parser.add_argument("--layout", default="", help="ours-flat/ours-hier: host name of each rank, comma-separated")
    args = parser.parse_args(argv)

    backend = make_backend(args.impl, args.layout.split(","))
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[backend.rank % len(cpus)]})
    if args.label:
        backend.name = args.label
    for nbytes in args.sizes:
        result = measure(backend, nbytes, args.target_s, args.min_iters, args.max_iters)
        result.update(backend.info())
        print(MARKER + json.dumps(result), flush=True)
    backend.barrier()  # nobody tears down while a peer still waits on the last size
    backend.close()
    sys.stdout.flush()
    sys.stderr.flush()
    if args.impl == "gloo":
        # torch+gloo on CPU can abort in its atexit/static destructors ("terminate called
        # without an active exception"); every result is already printed, so skip them.
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
