"""The elastic job bench/elastic.py runs under the local elastic launcher: an MLP trained with
collective.torch's DistributedOptimizer inside ``hvd.elastic.run``, committing every --commit-every steps
(0: never). Rank 0 prints its median step time after the warm-up. With --victim-step, the last rank of the
first formation reports its pid after that step and blocks until killed; rank 0 then reports when the
function resumed and when its first step after the re-form ended."""

import argparse
import json
import os
import statistics
import threading
import time

import torch

import collective.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--commit-every", type=int, default=0)
parser.add_argument("--victim-step", type=int, default=-1)
args = parser.parse_args()

torch.set_num_threads(1)
hvd.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 10))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                     named_parameters=model.named_parameters())
x, y = torch.randn(32, 512), torch.randint(0, 10, (32,))
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)
resets = 0  # this process's own count, not state: sync() would take rank 0's


def count_reset():
    global resets
    resets += 1


state.register_reset_callbacks([count_reset])


@hvd.elastic.run
def train(state):
    if hvd.rank() == 0 and resets:
        print(f"@@elastic resumed {time.time()!r} step={state.step} size={hvd.size()}", flush=True)
    times = []
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
    return times


times = train(state)
if hvd.rank() == 0:
    print("@@elastic_step " + json.dumps({"median_s": statistics.median(times[args.warmup:])}), flush=True)
