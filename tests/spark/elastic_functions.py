"""Elastic training functions the spark_hvd.run_elastic tests run on ranks (pickled by value, with
tests/elastic/scripts/elastic_data.py's problem, so that the tests check the weights against its reference)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "elastic" / "scripts"))
from elastic_data import BASE_LR, reference_weights  # noqa: E402
from torch_elastic_model import sgd_step, zero_model_and_optimizer  # noqa: E402


def claim(marker: str) -> bool:
    """True for the one caller that creates ``marker`` (so a victim dies in the first stage only)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def hold(gate: str, label: str) -> None:
    """Waits until the test creates ``gate`` (a file): the test acts on the job (kills or restarts a worker)
    while it is held at a known step. Every rank says so first, with its process id."""
    if os.path.exists(gate):
        return
    print(f"HOLD {label} pid={os.getpid()}", flush=True)
    while not os.path.exists(gate):
        time.sleep(0.05)  # polls the test's gate file (a condition), not a guessed delay


def torch_elastic_train(steps: int, commit_every: int, marker_dir: str, victim_rank: int = -1,
                        victim_step: int = -1, fail_rank: int = -1, holds: tuple = (),
                        fail_with: str = "value") -> dict:
    """SGD on elastic_data's problem with a TorchState committed every ``commit_every`` steps. In the first
    stage, ``victim_rank`` SIGKILLs its own process after step ``victim_step``; ``fail_rank`` raises a
    ValueError at step 2 (``fail_with="nonfinite"``: a NonFiniteLossError). ``holds``: (step, gate file)
    pairs: before that step, every rank waits for the gate."""
    import collective.torch as hvd

    hvd.init()
    model, optimizer = zero_model_and_optimizer(hvd)
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0, sizes=[])

    def rescale_lr() -> None:
        for group in optimizer.param_groups:
            group["lr"] = BASE_LR * hvd.size()

    state.register_reset_callbacks([rescale_lr])

    @hvd.elastic.run
    def train(state) -> None:
        if hvd.rank() == 0:
            print(f"RESUMED step={state.step} size={hvd.size()}", flush=True)
        while state.step < steps:
            for step, gate in holds:
                if state.step == step:
                    hold(gate, f"step={step} size={hvd.size()}")
            if hvd.rank() == fail_rank and state.step == 2:
                if fail_with == "nonfinite":
                    from spark_hvd.errors import NonFiniteLossError

                    raise NonFiniteLossError("loss is nan at step 2")
                raise ValueError("bad batch at step 2")
            sgd_step(hvd, model, optimizer, state)
            if hvd.rank() == victim_rank and state.step == victim_step and claim(os.path.join(marker_dir, "victim")):
                os.kill(os.getpid(), signal.SIGKILL)
            if state.step % commit_every == 0:
                state.commit()

    train(state)
    return {"rank": hvd.rank(), "size": hvd.size(), "w": model.weight.detach().numpy()[0].tolist(),
            "b": float(model.bias.item()), "sizes": list(state.sizes)}


def assert_reference_weights(result: dict) -> None:
    """The test's side: a rank's final weights are the float64 reference of the sizes its steps ran at."""
    import numpy as np

    w, b = reference_weights(result["sizes"])
    np.testing.assert_allclose(result["w"], w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(result["b"], b, rtol=1e-10, atol=1e-12)


def record_start(marker_dir: str) -> None:
    """A line per start of fn on rank 0, in ``marker_dir``/fn_starts: how many formations ran fn."""
    with open(os.path.join(marker_dir, "fn_starts"), "a") as starts:
        starts.write(f"pid={os.getpid()}\n")


def counted_train(marker_dir: str, steps: int = 4) -> dict:
    """Commits every step and counts its rendezvous in the committed state, as Horovod's test function does:
    a formation that ran fn and whose commits were kept would show in the count."""
    import collective.torch as hvd

    hvd.init()
    if hvd.rank() == 0:
        record_start(marker_dir)
    model, optimizer = zero_model_and_optimizer(hvd)
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0, sizes=[], rendezvous=0)

    @hvd.elastic.run
    def train(state) -> None:
        state.rendezvous += 1
        while state.step < steps:
            sgd_step(hvd, model, optimizer, state)
            state.commit()

    train(state)
    return {"rank": hvd.rank(), "rendezvous": state.rendezvous, "step": state.step}


def hold_at_start(held_rank: int, marker_dir: str, rank: int) -> None:
    """TaskSpec.before_start of the fencing test: the first task of ``held_rank`` waits, before it reports that
    it started, until the test opens ``marker_dir``/release (a FIFO) for writing."""
    if rank != held_rank or not claim(os.path.join(marker_dir, "held")):
        return
    with open(os.path.join(marker_dir, "release")) as release:   # blocks until the test's writer opens it
        release.read()


def fail_once(marker_dir: str, rank: int, epoch: int, batch: int) -> None:
    """Raises the first time ``rank`` reaches (epoch, batch) when the test left a marker file for it."""
    marker = os.path.join(marker_dir, f"rank_{rank}_epoch_{epoch}_batch_{batch}_fail")
    if os.path.exists(marker):
        os.unlink(marker)
        raise RuntimeError(f"training failed at epoch {epoch} batch {batch}: restart")


def epochs_with_failures(batches_per_commit: int, batches_per_epoch: int, epochs: int, marker_dir: str) -> tuple:
    """Horovod's fault-tolerant scenario: epochs of batches on a fixed batch, a commit every
    ``batches_per_commit`` batches and at each epoch's end, and errors raised where the test's markers say.
    Returns (allgather of [rank, epoch, batch, rendezvous] over the ranks, rank)."""
    import torch

    import collective.torch as hvd

    hvd.init()
    generator = torch.Generator().manual_seed(7)
    data = torch.randn(32, 2, generator=generator)
    target = torch.randint(0, 2, (32,), generator=generator)
    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.fill_(1.0)
        model.bias.fill_(1.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    state = hvd.elastic.TorchState(model, optimizer, batch=0, epoch=0, commits=0, rendezvous=0)

    def gathered() -> list:
        return hvd.allgather(torch.tensor([hvd.rank(), state.epoch, state.batch, state.rendezvous]),
                             name="state").tolist()

    @hvd.elastic.run
    def train(state) -> tuple:
        state.rendezvous += 1
        for state.epoch in range(state.epoch, epochs):
            for state.batch in range(state.batch, batches_per_epoch):
                fail_once(marker_dir, hvd.rank(), state.epoch, state.batch)
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(data), target).backward()
                optimizer.step()
                if state.batch % batches_per_commit == 0:
                    gathered()
                    state.commits += 1
                    state.commit()
            gathered()
            state.commits += 1
            state.commit()
            state.batch = 0
        return gathered(), hvd.rank()

    return train(state)
