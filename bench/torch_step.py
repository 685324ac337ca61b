"""Training-step benchmark: collective.torch's DistributedOptimizer against torch DDP over gloo.

    .venv/bin/python bench/torch_step.py [--rounds 3] [--steps 20] [--batch 32] [--ranks 2] [--baseline PYTHON]

An MLP of about 10M parameters (float32) trains on CPU with one intra-op thread per rank, on a fixed
random batch per rank. Configurations, each started as its own set of processes from here:
  ours-fusion    DistributedOptimizer, default fusion threshold (128 MiB)
  ours-nofusion  DistributedOptimizer, fusion_threshold_bytes=0
  ddp-gloo       torch.nn.parallel.DistributedDataParallel over gloo (default 25 MB buckets)
  single         one process, plain optimizer, at the per-rank batch (the compute-only baseline)
A configuration's time = max over ranks of that rank's median step time; the reported figure is the
median over --rounds interleaved rounds (the machine drifts between fast and slow phases).
Communication overhead = step time - single-process step time. Target: ours / DDP <= 1.0.
--baseline PYTHON adds ours-fusion@base: ours-fusion on an interpreter that imports another build of the
package (see bench/_baseline.py), interleaved with the rest: a before/after in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from _baseline import SAFE_PATH, SUFFIX as BASELINE_SUFFIX, checked_baseline
from _step_runs import free_port, interleaved_medians, print_step_table, run_processes

MARKER = "@@torch_step "
CONFIGS = ("ours-fusion", "ours-nofusion", "ddp-gloo", "single")
LAYERS = (1024, 2048, 2048, 1024, 1024, 512, 10)
WARMUP_STEPS = 5
# torch 2.13's gloo teardown sometimes aborts ("terminate called without an active exception");
# the results are printed before that, so a DDP rank ending this way still counts.
ABORT_RETURN_CODE = -6


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for fan_in, fan_out in zip(LAYERS[:-1], LAYERS[1:]):
        layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def batch_for(rank: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + rank)
    return torch.randn(batch, LAYERS[0], generator=gen), torch.randint(0, LAYERS[-1], (batch,), generator=gen)


def timed_steps(model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank: int, batch: int,
                steps: int) -> list[float]:
    x, y = batch_for(rank, batch)
    times = []
    for step in range(WARMUP_STEPS + steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step >= WARMUP_STEPS:
            times.append(time.perf_counter() - start)
    return times


def emit(config: str, rank: int, times: list[float]) -> None:
    print(MARKER + json.dumps({"config": config, "rank": rank, "median_s": statistics.median(times)}), flush=True)


# ---- the roles each process plays ------------------------------------------------------------

def run_ours(config: str, batch: int, steps: int) -> None:
    import collective.torch as hvd

    fusion = {} if config == "ours-fusion" else {"fusion_threshold_bytes": 0}
    hvd.init(**fusion)
    model = build_model()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters())
    emit(config, hvd.rank(), timed_steps(model, optimizer, hvd.rank(), batch, steps))
    hvd.shutdown()


def run_ddp(batch: int, steps: int) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    emit("ddp-gloo", dist.get_rank(), timed_steps(model, optimizer, dist.get_rank(), batch, steps))
    dist.destroy_process_group()


def run_single(batch: int, steps: int) -> None:
    model = build_model()
    emit("single", 0, timed_steps(model, torch.optim.SGD(model.parameters(), lr=0.01), 0, batch, steps))


# ---- the driver ------------------------------------------------------------------------------

def commands(config: str, args: argparse.Namespace) -> list[tuple[list[str], dict[str, str]]]:
    me = [sys.executable, str(Path(__file__).resolve())]
    role = ["--role", config, "--batch", str(args.batch), "--steps", str(args.steps)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    if config.endswith(BASELINE_SUFFIX):
        # The launcher, and so its ranks, on the baseline's interpreter (ranks use sys.executable).
        role[1] = config.removesuffix(BASELINE_SUFFIX)
        launcher = [str(args.baseline), *SAFE_PATH, "-m", "collective.run", "-np", str(args.ranks), "--timeout", "300"]
        return [(launcher + me[1:] + role, env)]
    if config.startswith("ours"):
        launcher = [sys.executable, "-m", "collective.run", "-np", str(args.ranks), "--timeout", "300"]
        return [(launcher + me[1:] + role, env)]
    if config == "ddp-gloo":
        rendezvous = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(args.ranks)}
        return [(me + role, {**env, **rendezvous, "RANK": str(r)}) for r in range(args.ranks)]
    return [(me + role, env)]


def run_config(config: str, args: argparse.Namespace) -> float:
    """Starts one configuration's processes; returns the max over ranks of the median step time."""
    # DDP over gloo sometimes aborts at exit on torch 2.13 after reporting (see ENVIRONMENT.md).
    tolerated = (ABORT_RETURN_CODE,) if config == "ddp-gloo" else ()
    return run_processes(config, commands(config, args), MARKER, 1 if config == "single" else args.ranks,
                         timeout_s=600, tolerated_returncodes=tolerated)


def drive(args: argparse.Namespace) -> None:
    print(f"MLP {LAYERS}, {sum(p.numel() for p in build_model().parameters()) / 1e6:.2f}M parameters (float32), "
          f"batch {args.batch} per rank, {args.ranks} ranks, 1 intra-op thread each, "
          f"{args.steps} timed steps after {WARMUP_STEPS} warm-up, {args.rounds} interleaved rounds", flush=True)
    configs = CONFIGS + (("ours-fusion" + BASELINE_SUFFIX,) if args.baseline is not None else ())
    step = interleaved_medians(configs, args.rounds, lambda config: run_config(config, args))
    print_step_table(configs, step)
    for ours in ("ours-fusion", "ours-nofusion"):
        print(f"{ours} / ddp-gloo step-time ratio: {step[ours] / step['ddp-gloo']:.3f} (target <= 1.0)")
    if args.baseline is not None:
        before = step["ours-fusion" + BASELINE_SUFFIX]
        print(f"ours-fusion / ours-fusion{BASELINE_SUFFIX} step-time ratio: {step['ours-fusion'] / before:.3f} "
              "(after / before; 1.0 = no change)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--role", choices=CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--baseline", type=Path, default=None,
                        help="an interpreter that imports another build: adds ours-fusion" + BASELINE_SUFFIX)
    args = parser.parse_args()
    if args.baseline is not None and args.role is None:
        try:
            print(f"baseline: {checked_baseline(args.baseline)}", flush=True)
        except ValueError as e:
            parser.error(str(e))
    torch.set_num_threads(1)
    if args.role is None:
        drive(args)
    elif args.role.startswith("ours"):
        run_ours(args.role, args.batch, args.steps)
    elif args.role == "ddp-gloo":
        run_ddp(args.batch, args.steps)
    else:
        run_single(args.batch, args.steps)


if __name__ == "__main__":
    main()
