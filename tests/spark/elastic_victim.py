"""A test model for elastic fits: a float64 classifier whose forward kills its own process (SIGKILL, as a
lost executor) at a given call on a given rank of a given world size, so a test loses a rank at an exact
step. Pickled by value, so the ranks need not import the tests."""

from __future__ import annotations

import os
import signal

import torch
from torch import nn


class KilledAtStep(nn.Module):
    """``victim_rank`` dies at its ``kill_at_call``-th forward (1-based) while the job has ``while_size`` ranks;
    any other rank, or any other size, trains as a plain two-layer classifier. With ``marker`` (a path), only
    the first process to create that file dies: a relaunched stage (new processes, the same size) trains on."""

    def __init__(self, features: int, classes: int, victim_rank: int, kill_at_call: int, while_size: int = 2,
                 seed: int = 0, marker: str | None = None) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = nn.Sequential(nn.Linear(features, 8), nn.Tanh(), nn.Linear(8, classes)).double()
        self.victim_rank, self.kill_at_call, self.while_size = victim_rank, kill_at_call, while_size
        self.calls = 0
        self.marker = marker

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import collective.torch as hvd

        if not hvd.is_initialized():
            return self.body(x)   # the driver's sample check: not a training step
        self.calls += 1
        if (hvd.size() == self.while_size and hvd.rank() == self.victim_rank and self.calls == self.kill_at_call
                and self._claim()):
            os.kill(os.getpid(), signal.SIGKILL)
        return self.body(x)

    def _claim(self) -> bool:
        if self.marker is None:
            return True
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True


class HeldAtStep(nn.Module):
    """Every rank, at its ``hold_at_call``-th forward while the job has ``while_size`` ranks, writes
    ``<hold_dir>/held-<rank>-<pid>`` and waits until ``<hold_dir>/go`` exists (at most ``wait_s``), so that a
    test can kill a chosen rank's worker at an exact step; any other size trains on."""

    def __init__(self, features: int, classes: int, hold_at_call: int, while_size: int, hold_dir: str,
                 wait_s: float = 300.0, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = nn.Sequential(nn.Linear(features, 8), nn.Tanh(), nn.Linear(8, classes)).double()
        self.hold_at_call, self.while_size, self.hold_dir, self.wait_s = hold_at_call, while_size, hold_dir, wait_s
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import time

        import collective.torch as hvd

        if not hvd.is_initialized():
            return self.body(x)   # the driver's sample check: not a training step
        self.calls += 1
        if hvd.size() == self.while_size and self.calls == self.hold_at_call:
            open(os.path.join(self.hold_dir, f"held-{hvd.rank()}-{os.getpid()}"), "w").close()
            deadline = time.monotonic() + self.wait_s
            while not os.path.exists(os.path.join(self.hold_dir, "go")) and time.monotonic() < deadline:
                time.sleep(0.05)   # polls the test's gate (a condition), not a guessed delay
        return self.body(x)
