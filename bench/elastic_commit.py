"""The cost of one ``TorchState.commit()`` against one training step of bench/estimator.py's model, in one
process (no Spark, no peers): what ``TorchEstimator(elastic=True)`` adds per ``elastic_commit_steps`` steps.
``--framework keras``: ``KerasState.commit()`` against a ``train_on_batch`` step of the same MLP in Keras
(what ``KerasEstimator(elastic=True)`` adds). ``--framework lightning``: the Lightning estimator's commit
(Lightning's checkpoint of a Trainer that has trained the MLP, serialized, into an ObjectState) against the
torch step above, a lower bound of a Lightning step, so the share printed is an upper bound.

    .venv/bin/python bench/elastic_commit.py [--steps 200] [--commit-steps 50] [--framework keras]

Prints the median step and commit times of --rounds rounds and the overhead of a commit every
--commit-steps steps, as a share of the step time (target: <= 5% at the default of 50). The commit holds
what the recipe commits beside the model: the epoch's data position and this rank's random generators.

Then what the data position costs on its own (``--position-rows`` rows, ``--position-ranks`` ranks re-formed to
three quarters of them mid-epoch): its size as a commit pickles it and the time every rank spends computing it
at a commit, against the list of trained row ids a sampler-based position (Horovod's ``ElasticSampler``)
commits at the same point; and the generators' states (size and capture time per rank).
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
    parser.add_argument("--position-rows", type=int, default=100_000_000)
    parser.add_argument("--position-ranks", type=int, default=64)
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
    position_figures(args.position_rows, args.position_ranks)
    return 0


def position_figures(rows: int, ranks: int, batch: int = 32, repeats: int = 1000) -> None:
    """The data position's commit size and computing time, mid-epoch after a re-form from ``ranks`` to three
    quarters of them; the generators' size and capture time."""
    import pickle

    import numpy as np

    from spark_hvd.data.read.epoch_position import EpochPosition
    from spark_hvd.recipe import rng_states

    steps = rows // (ranks * batch)
    before = EpochPosition.fresh(0, rows).deal(ranks, steps, batch).after(steps // 3)
    after_ranks = max(1, ranks * 3 // 4)
    left = -(-before.pass_rows_left // (after_ranks * batch))
    began = time.perf_counter()
    for _ in range(repeats):   # what EpochEvents does at a commit: the deal, then the position after it
        position = before.deal(after_ranks, left, batch).after(left // 2).to_ints()
    compute_s = (time.perf_counter() - began) / repeats
    size = len(pickle.dumps(position, protocol=pickle.HIGHEST_PROTOCOL))
    trained = rows - EpochPosition.from_ints(position).pass_rows_left
    row_list = len(pickle.dumps(np.arange(trained, dtype=np.int64), protocol=pickle.HIGHEST_PROTOCOL))
    print(f"data position, {rows:,} rows, {ranks} -> {after_ranks} ranks mid-epoch: {len(position)} integers, "
          f"{size} bytes pickled, {compute_s * 1e6:.1f} us to compute; the trained rows' ids instead: "
          f"{row_list / 2**20:,.1f} MiB")
    began = time.perf_counter()
    for _ in range(repeats):
        states = rng_states.capture()
    capture_s = (time.perf_counter() - began) / repeats
    print(f"random generators (python, numpy, torch): {len(pickle.dumps(states))} bytes a rank, "
          f"{capture_s * 1e6:.1f} us to capture")


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
                                             sums=None, **_position_attrs())


def _position_attrs() -> dict[str, Any]:
    """What the recipe commits beside the framework's state: the epoch's data position (64 ranks, a third of
    the way through an epoch of 10^8 rows) and this rank's generators (one rank's list)."""
    from spark_hvd.data.read.epoch_position import EpochPosition
    from spark_hvd.recipe import rng_states

    position = EpochPosition.fresh(0, 10**8).deal(64, 48_828, 32).after(16_276).to_ints()
    return {"position": position, "rng": [rng_states.capture()]}


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
    state = hvd.elastic.ObjectState(checkpoint=None, epoch=0, step=0, **_position_attrs())

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

    return hvd, step, hvd.elastic.KerasState(model, optimizer, epoch=0, batch=0, history=[], **_position_attrs())


if __name__ == "__main__":
    sys.exit(main())
