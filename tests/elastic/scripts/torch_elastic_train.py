"""An elastic torch job for the tests: SGD on elastic_data's problem, one commit every --commit-every steps.

Rank 0 reports each (re)start of the training function (``RESUMED step=S size=N``) and the final weights.
``--victim-rank R --victim-step S``: in the first formation, rank R reports ``VICTIM pid=P`` after step S and
then blocks until the test kills it. ``--until-size N``: keeps stepping until the job has reached N ranks and
then ``--steps`` more (the add-a-slot test). ``--fail-rank R``: rank R raises a ValueError at step 2.
"""

import argparse
import json
import os
import threading

import collective.torch as hvd
from elastic_data import BASE_LR
from torch_elastic_model import sgd_step, zero_model_and_optimizer

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--commit-every", type=int, default=3)
parser.add_argument("--victim-rank", type=int, default=-1)
parser.add_argument("--victim-step", type=int, default=-1)
parser.add_argument("--until-size", type=int, default=0)
parser.add_argument("--fail-rank", type=int, default=-1, help="raise a ValueError of its own on this rank")
args = parser.parse_args()

hvd.init()
model, optimizer = zero_model_and_optimizer(hvd)
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0, sizes=[])


resets = 0  # this process's own count, not state: sync() would take rank 0's


def on_reset():
    global resets
    resets += 1
    for group in optimizer.param_groups:
        group["lr"] = BASE_LR * hvd.size()


state.register_reset_callbacks([on_reset])


@hvd.elastic.run
def train(state):
    if hvd.rank() == 0:
        print(f"RESUMED step={state.step} size={hvd.size()}", flush=True)
    target = None
    while True:
        if args.until_size:
            if hvd.size() >= args.until_size and target is None:
                target = state.step + args.steps
            if target is not None and state.step >= target:
                break
        elif state.step >= args.steps:
            break
        if hvd.rank() == args.fail_rank and state.step == 2:
            raise ValueError("bad batch at step 2")
        sgd_step(hvd, model, optimizer, state)
        if resets == 0 and hvd.rank() == args.victim_rank and state.step == args.victim_step:
            print(f"VICTIM pid={os.getpid()} step={state.step}", flush=True)
            threading.Event().wait()  # until the test kills this process
        if state.step % args.commit_every == 0:
            state.commit()


train(state)
if hvd.rank() == 0:
    weights = model.weight.detach().numpy()[0].tolist()
    print("FINAL " + json.dumps({"w": weights, "b": float(model.bias.item()), "sizes": state.sizes,
                                 "size": hvd.size()}), flush=True)
