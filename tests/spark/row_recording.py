"""Test models that write down which rows every training step trains (by an ``id`` feature column), and can
fail at a chosen step of a chosen rank: the evidence that an epoch trains each of its rows once across kills,
resumes and re-formations. Pickled by value, so the ranks need not import the tests."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import torch
from torch import nn


class RecordingNet(nn.Module):
    """A float64 classifier of ``features`` (with dropout, so that resuming exactly needs the generators)
    whose second input is each row's id: every training step appends ``size rank id...`` to
    ``<record_dir>/<pid>.ids``. ``fail``: (rank, call, size): that rank raises (or with ``kill``, is
    SIGKILLed, as a lost executor) at its call-th training step while the job has that size, once (the
    first process to create ``<record_dir>/failed``)."""

    def __init__(self, features: int, classes: int, record_dir: str, fail: tuple[int, int, int] | None = None,
                 kill: bool = False, dropout: float = 0.2, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = nn.Sequential(nn.Linear(features, 16), nn.Tanh(), nn.Dropout(dropout),
                                  nn.Linear(16, classes)).double()
        self.record_dir, self.fail, self.kill = record_dir, fail, kill
        self.calls = 0

    def forward(self, x: torch.Tensor, ids: torch.Tensor | None = None) -> torch.Tensor:
        import collective.torch as hvd

        if self.training and hvd.is_initialized() and ids is not None:
            self.calls += 1
            if self.fail == (hvd.rank(), self.calls, hvd.size()) and self._claim():
                if self.kill:
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError(f"injected failure at step {self.calls} of rank {hvd.rank()}")
            record(self.record_dir, hvd.size(), hvd.rank(), ids)
        return self.body(x.double())

    def _claim(self) -> bool:
        try:
            os.close(os.open(os.path.join(self.record_dir, "failed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True


def record(record_dir: str, size: int, rank: int, ids: torch.Tensor) -> None:
    """Appends one step's row ids to this process's record."""
    line = " ".join(str(int(i)) for i in ids.detach().reshape(-1).tolist())
    with open(os.path.join(record_dir, f"{os.getpid()}.ids"), "a") as f:
        f.write(f"{size} {rank} {line}\n")


def steps_by_process(record_dir: str | Path) -> list[list[tuple[int, int, list[int]]]]:
    """Each process's steps in order: (size, rank, ids)."""
    out = []
    for path in sorted(Path(record_dir).glob("*.ids")):
        steps = []
        for line in path.read_text().splitlines():
            size, rank, *ids = (int(v) for v in line.split())
            steps.append((size, rank, ids))
        out.append(steps)
    return out


def trained_rows(record_dir: str | Path, kept_steps: dict[int, int | None]) -> Counter:
    """How often each row id was trained, counting of each process the first ``kept_steps[size]`` steps it
    ran at that size (None: all): the steps a checkpoint or commit kept, the rest being rolled back."""
    counts: Counter = Counter()
    for steps in steps_by_process(record_dir):
        at_size: Counter = Counter()
        for size, _, ids in steps:
            at_size[size] += 1
            limit = kept_steps.get(size, 0)
            if limit is None or at_size[size] <= limit:
                counts.update(ids)
        assert set(at_size) <= set(kept_steps), f"steps at sizes {set(at_size)} recorded"
    return counts
