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
    any other rank, or any other size, trains as a plain two-layer classifier."""

    def __init__(self, features: int, classes: int, victim_rank: int, kill_at_call: int, while_size: int = 2,
                 seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = nn.Sequential(nn.Linear(features, 8), nn.Tanh(), nn.Linear(8, classes)).double()
        self.victim_rank, self.kill_at_call, self.while_size = victim_rank, kill_at_call, while_size
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import collective.torch as hvd

        self.calls += 1
        if (hvd.is_initialized() and hvd.size() == self.while_size and hvd.rank() == self.victim_rank
                and self.calls == self.kill_at_call):
            os.kill(os.getpid(), signal.SIGKILL)
        return self.body(x)
