"""The elastic job bench/elastic.py runs under the local elastic launcher: an MLP trained with
collective.torch's DistributedOptimizer inside ``hvd.elastic.run``, committing every --commit-every steps
(0: never). Rank 0 prints its median step time after the warm-up. With --victim-step, the last rank of the
first formation reports its pid after that step and blocks until killed; rank 0 then reports when the
function resumed and when its first step after the re-form ended, and for each re-join (``runtime.join``, which
``hvd.elastic.run`` calls once the broken formation is torn down) when it started and when its mesh was built.
--width sets the MLP's hidden width (1024: 1.6M parameters), so that recovery at many ranks can use a model
whose step does not dominate."""

import argparse
import json
import os
import statistics
import threading
import time

import torch

import collective.torch as hvd
from collective import runtime

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--commit-every", type=int, default=0)
parser.add_argument("--victim-step", type=int, default=-1)
parser.add_argument("--width", type=int, default=1024)
args = parser.parse_args()

torch.set_num_threads(1)
hvd.init()
torch.manual_seed(0)
width = args.width
model = torch.nn.Sequential(torch.nn.Linear(512, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                            torch.nn.ReLU(), torch.nn.Linear(width, 10))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                     named_parameters=model.named_parameters())
x, y = torch.randn(32, 512), torch.randint(0, 10, (32,))
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)
resets = 0  # this process's own count, not state: sync() would take rank 0's


def count_reset():
    global resets
    resets += 1


state.register_reset_callbacks([count_reset])
_join = runtime.join


def timed_join(*join_args, **join_kwargs):
    """runtime.join as hvd.elastic.run calls it to re-join (hvd.init() above was the first join), reporting
    on rank 0 when it starts (the broken formation torn down) and when it returns (the new mesh built).
    Rank 0 stays rank 0 here: the victim is the last rank."""
    rank0 = first_rank == 0
    if rank0:
        print(f"@@elastic join-start {time.time()!r}", flush=True)
    _join(*join_args, **join_kwargs)
    if rank0:
        print(f"@@elastic join-end {time.time()!r}", flush=True)


first_rank = hvd.rank()
runtime.join = timed_join  # hvd.elastic.run re-joins through runtime.join


@hvd.elastic.run
def train(state):
    if hvd.rank() == 0 and resets:
        print(f"@@elastic resumed {time.time()!r} step={state.step} size={hvd.size()}", flush=True)
    times = []
    try:
        run_steps(times)
    except Exception:
        if first_rank == 0:
            print(f"@@elastic noticed {time.time()!r}", flush=True)
        raise
    return times


def run_steps(times):
    while state.step < args.steps:
        start = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        state.step += 1
        if args.commit_every and state.step % args.commit_every == 0:
            state.commit()
        times.append(time.perf_counter() - start)
        if hvd.rank() == 0 and resets and len(times) == 1:
            print(f"@@elastic first-step {time.time()!r}", flush=True)
        if resets == 0 and state.step == args.victim_step and hvd.rank() == hvd.size() - 1:
            print(f"@@elastic victim {os.getpid()} {time.time()!r}", flush=True)
            threading.Event().wait()  # until bench/elastic.py kills this process


times = train(state)
if hvd.rank() == 0:
    print("@@elastic_step " + json.dumps({"median_s": statistics.median(times[args.warmup:])}), flush=True)
