"""The cost of one ``TorchState.commit()`` against one training step of bench/estimator.py's model, in one
process (no Spark, no peers): what ``TorchEstimator(elastic=True)`` adds per ``elastic_commit_steps`` steps.
``--framework keras``: ``KerasState.commit()`` against a ``train_on_batch`` step of the same MLP in Keras
(what ``KerasEstimator(elastic=True)`` adds). ``--framework lightning``: the Lightning estimator's commit
(Lightning's checkpoint of a Trainer that has trained the MLP, serialized, into an ObjectState) against the
torch step above, a lower bound of a Lightning step, so the share printed is an upper bound.

    .venv/bin/python bench/elastic_commit.py [--steps 200] [--commit-steps 50] [--framework keras]

Prints the median step and commit times of --rounds rounds and the overhead of a commit every
--commit-steps steps, as a share of the step time (target: <= 5% at the default of 50).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable

import torch

from estimator import BATCH, CLASSES, FEATURES, LR, lightning_mlp, make_mlp


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--commit-steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--framework", choices=("torch", "keras", "lightning"), default="torch")
    args = parser.parse_args()

    hvd, step, state = {"torch": torch_parts, "keras": keras_parts, "lightning": lightning_parts}[args.framework]()
    for _ in range(20):   # warm-up: allocator, first-call costs
        step()
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


def torch_parts() -> tuple[Any, Callable[[], None], Any]:
    """collective.torch, one training step of the MLP, and TorchState as TorchEstimator's."""
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

    return hvd, step, hvd.elastic.TorchState(model=model, optimizer=optimizer, epoch=0, step=0, history=[],
                                             sums=None)


def lightning_parts() -> tuple[Any, Callable[[], None], Any]:
    """torch_parts's step, and what the Lightning estimator commits: a Trainer on CollectiveStrategy that has
    trained the MLP in a LightningModule for a few steps, its checkpoint committed as the recipe does."""
    import tempfile

    import pytorch_lightning as pl

    from spark_hvd.lightning.elastic_commits import checkpoint_bytes
    from spark_hvd.lightning.strategy import CollectiveStrategy

    hvd, step, _ = torch_parts()

    batches = [{"features": torch.randn(BATCH, FEATURES), "label": torch.randint(0, CLASSES, (BATCH,))}
               for _ in range(5)]
    trainer = pl.Trainer(strategy=CollectiveStrategy(torch.device("cpu")), accelerator="cpu", devices=1, max_epochs=1,
                         logger=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tempfile.mkdtemp(prefix="bench-elastic-commit-"))
    trainer.fit(lightning_mlp(), torch.utils.data.DataLoader(batches, batch_size=None))
    state = hvd.elastic.ObjectState(checkpoint=None, epoch=0, step=0)

    class Committing:
        def commit(self) -> None:
            state.checkpoint = checkpoint_bytes(trainer)
            state.epoch, state.step = 0, 1
            state.commit()

    return hvd, step, Committing()


def keras_parts() -> tuple[Any, Callable[[], None], Any]:
    """collective.keras, one train_on_batch step of the same MLP, and KerasState as KerasEstimator's."""
    import keras
    import numpy as np

    import collective.keras as hvd

    hvd.init()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(128, activation="relu"), keras.layers.Dense(CLASSES)])
    optimizer = hvd.DistributedOptimizer(keras.optimizers.Adam(LR))
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    optimizer.build(model.trainable_variables)
    x = np.random.default_rng(0).random((BATCH, FEATURES), dtype=np.float32)
    y = np.random.default_rng(1).integers(0, CLASSES, BATCH)

    def step() -> None:
        model.train_on_batch(x, y)

    return hvd, step, hvd.elastic.KerasState(model, optimizer, epoch=0, batch=0, history=[])


if __name__ == "__main__":
    sys.exit(main())
