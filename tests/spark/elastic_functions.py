"""Elastic training functions the spark_hvd.run_elastic tests run on ranks (pickled by value, with
tests/elastic/scripts/elastic_data.py's problem, so that the tests check the weights against its reference)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "elastic" / "scripts"))
from elastic_data import BASE_LR, FEATURES, shard  # noqa: E402


def claim(marker: str) -> bool:
    """True for the one caller that creates ``marker`` (so a victim dies in the first stage only)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def torch_elastic_train(steps: int, commit_every: int, marker_dir: str, victim_rank: int = -1,
                        victim_step: int = -1, fail_rank: int = -1, grow_to: int = 0) -> dict:
    """SGD on elastic_data's problem with a TorchState committed every ``commit_every`` steps. In the first
    stage, ``victim_rank`` SIGKILLs its own process after step ``victim_step``; ``fail_rank`` raises a
    ValueError at step 2. ``grow_to``: rank 0 writes ``grow`` in marker_dir after step 2 (the test then frees
    a slot), and training goes on until the job has that many ranks and then ``steps`` more steps."""
    import torch

    import collective.torch as hvd

    hvd.init()
    model = torch.nn.Linear(FEATURES, 1).double()
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=BASE_LR * hvd.size()),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0, sizes=[], target=0)

    def rescale_lr() -> None:
        for group in optimizer.param_groups:
            group["lr"] = BASE_LR * hvd.size()

    state.register_reset_callbacks([rescale_lr])

    @hvd.elastic.run
    def train(state) -> None:
        if hvd.rank() == 0:
            print(f"RESUMED step={state.step} size={hvd.size()}", flush=True)
        if not grow_to:
            state.target = steps
        while not state.target or state.step < state.target:
            if hvd.rank() == fail_rank and state.step == 2:
                raise ValueError("bad batch at step 2")
            x, y = (torch.from_numpy(a) for a in shard(state.step, hvd.rank(), hvd.size()))
            optimizer.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
            state.sizes.append(hvd.size())
            state.step += 1
            if hvd.rank() == victim_rank and state.step == victim_step and claim(os.path.join(marker_dir, "victim")):
                os.kill(os.getpid(), signal.SIGKILL)
            if grow_to and hvd.rank() == 0 and state.step == 2:
                claim(os.path.join(marker_dir, "grow"))
            if grow_to and not state.target and hvd.size() >= grow_to:
                state.target = state.step + steps
            if state.step % commit_every == 0:
                state.commit()

    train(state)
    return {"rank": hvd.rank(), "size": hvd.size(), "w": model.weight.detach().numpy()[0].tolist(),
            "b": float(model.bias.item()), "sizes": list(state.sizes)}
