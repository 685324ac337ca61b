"""The cost of one ``TorchState.commit()`` against one training step of bench/estimator.py's model, in one
process (no Spark, no peers): what ``TorchEstimator(elastic=True)`` adds per ``elastic_commit_steps`` steps.

    .venv/bin/python bench/elastic_commit.py [--steps 200] [--commit-steps 50]

Prints the median step and commit times of --rounds rounds and the overhead of a commit every
--commit-steps steps, as a share of the step time (target: <= 5% at the default of 50).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from estimator import BATCH, CLASSES, FEATURES, LR, make_mlp


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--commit-steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import collective.torch as hvd

    hvd.init()
    model = make_mlp()
    optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=LR),
                                         named_parameters=model.named_parameters())
    x, y = torch.randn(BATCH, FEATURES), torch.randint(0, CLASSES, (BATCH,))

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    for _ in range(20):   # warm-up: allocator, first-call costs
        step()
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, epoch=0, step=0, history=[], sums=None)
    steps, commits = [], []
    for _ in range(args.rounds):   # interleaved, so that drift of the machine falls on both
        began = time.perf_counter()
        for _ in range(args.steps):
            step()
        steps.append((time.perf_counter() - began) / args.steps)
        began = time.perf_counter()
        for _ in range(args.steps):
            state.commit()
        commits.append((time.perf_counter() - began) / args.steps)
    step_s, commit_s = statistics.median(steps), statistics.median(commits)
    share = commit_s / (args.commit_steps * step_s)
    print(f"step {step_s * 1e3:.2f} ms, commit {commit_s * 1e3:.2f} ms (medians of {args.rounds} rounds of "
          f"{args.steps}); a commit every {args.commit_steps} steps adds {share * 100:.2f}% "
          f"(target <= 5%: {'met' if share <= 0.05 else 'missed'})")
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
