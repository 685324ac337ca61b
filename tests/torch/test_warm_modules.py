"""TorchEstimator's spare rank process (spark_hvd.run's keep_warm) imports what a fit's first steps need.

A module first imported inside the fit falls on the launch's critical path: torch.optim imports torch._dynamo
at an optimizer's first step, which is as slow as importing torch, and broadcast_optimizer_state steps once.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(240)

# In a fresh interpreter: import the warm modules, then do what train_rank does first (build a model and its
# optimizer, step it once as broadcast_optimizer_state does) and list what that imported.
_PROBE = """
import json, sys
from spark_hvd.torch.estimator import TorchEstimator
for name in TorchEstimator.warm_modules:
    __import__(name)
before = set(sys.modules)
import torch
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
for p in model.parameters():
    p.grad = torch.zeros_like(p)
optimizer.step()
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_the_first_optimizer_step_imports_nothing_heavy_after_the_warm_modules() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr
    imported = json.loads(done.stdout.strip().splitlines()[-1])
    # Without torch._dynamo among the warm modules the step imports over 800 modules (dynamo, sympy, ...).
    assert not [name for name in imported if name.startswith(("torch._dynamo", "sympy"))], imported
    assert len(imported) < 20, imported
