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
                        victim_step: int = -1, fail_rank: int = -1, holds: tuple = ()) -> dict:
    """SGD on elastic_data's problem with a TorchState committed every ``commit_every`` steps. In the first
    stage, ``victim_rank`` SIGKILLs its own process after step ``victim_step``; ``fail_rank`` raises a
    ValueError at step 2. ``holds``: (step, gate file) pairs: before that step, every rank waits for the gate."""
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
