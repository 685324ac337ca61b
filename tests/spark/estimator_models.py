"""Models, metrics and hooks the estimator tests train with. conftest-style registration makes
cloudpickle ship this module by value, so ranks and executors need not import the tests."""

from __future__ import annotations

import json
import os

import numpy as np
import torch
from torch import nn

from rank_functions import parent_process


def classifier(features: int, classes: int, hidden: int = 16, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def accuracy(output: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    return (output.argmax(dim=1) == label).float().mean()


def class_loss(output: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """Cross entropy on class labels, which arrive as floats (Horovod's rule), hence the cast."""
    return nn.functional.cross_entropy(output, label.long())


class Slope(nn.Module):
    """y = w * x: one weight, so a test can read what was learned."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


def slow_row(row: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A transformation_fn that sleeps 3 ms a row (96 ms a batch of 32): input wait far beyond a small model's
    step, in the training loop when the fit has no decode workers."""
    import time

    time.sleep(0.003)
    return row


class FailOnce:
    """A transformation_fn (called once per row, as Horovod's) that raises on one rank after
    ``after_calls`` rows, once: the marker file it leaves makes the next fit pass. Each rank process
    counts its own calls."""

    def __init__(self, marker: str, rank: int, after_calls: int) -> None:
        self.marker, self.rank, self.after_calls = marker, rank, after_calls
        self.calls = 0

    def __call__(self, row: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import collective

        if not collective.is_initialized():
            return row   # the driver's check of a sample, before launch
        self.calls += 1
        if collective.rank() == self.rank and self.calls > self.after_calls and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError(f"injected failure on rank {self.rank} after {self.after_calls} rows")
        return row


class RecordProcess:
    """A transformation_fn that passes rows through and, in each rank's process, writes once into
    ``directory`` which process started it: a keep_warm zygote (it was forked) or its Spark task."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.driver_pid = os.getpid()
        self.recorded = False

    def __call__(self, row: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import collective

        on_a_rank = os.getpid() != self.driver_pid and collective.is_initialized()  # not the driver's check
        if on_a_rank and not self.recorded:
            self.recorded = True
            parent, kind = parent_process()
            with open(os.path.join(self.directory, f"rank{collective.rank()}.json"), "w") as f:
                json.dump({"pid": os.getpid(), "parent": parent, "started_by": kind}, f)
        return row


class XorNet(nn.Module):
    """Horovod's XOR test model: its forward takes whatever shape input_shapes gives the batch."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin1 = nn.Linear(2, 8)
        self.lin2 = nn.Linear(8, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.lin2(torch.tanh(self.lin1(features.float()))))
