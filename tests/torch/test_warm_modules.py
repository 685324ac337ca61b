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


def _imported_by(probe: str) -> list[str]:
    """The modules ``probe`` lists as imported after the warm modules, run in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_first_optimizer_step_imports_nothing_heavy_after_the_warm_modules() -> None:
    imported = _imported_by(_PROBE)
    # Without torch._dynamo among the warm modules the step imports over 800 modules (dynamo, sympy, ...).
    assert not [name for name in imported if name.startswith(("torch._dynamo", "sympy"))], imported
    assert len(imported) < 20, imported


# In a fresh interpreter, as a spare rank process: the warm modules only (not the estimator, which the driver
# imports), then what the rank recipe and its feed import when a fit starts.
_RANK_PROBE = """
import json, sys
from spark_hvd.torch.estimator import TorchEstimator
warm = TorchEstimator.warm_modules
for name in [m for m in sys.modules if m.startswith(("spark_hvd", "pyspark", "pyarrow", "pandas"))]:
    del sys.modules[name]
for name in warm:
    __import__(name)
before = set(sys.modules)
import spark_hvd.torch.epoch_loop, spark_hvd.torch.batch_tensors, spark_hvd.data.read.arrow_reader
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_the_ranks_recipe_and_feed_are_among_the_warm_modules() -> None:
    """Reading the shard needs pyarrow: imported at launch, it delayed every fit's first step by ~0.3 s."""
    imported = _imported_by(_RANK_PROBE)
    assert not [name for name in imported if name.startswith(("pyarrow", "pandas"))], imported
    assert len(imported) < 20, imported
