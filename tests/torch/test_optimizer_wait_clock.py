"""DistributedOptimizer.communication_wait_s: the seconds its steps waited for the gradients' allreduces."""

from __future__ import annotations

import json
import subprocess
import sys

# One rank, in its own process (these tests' process must stay uninitialised).
_SCRIPT = """
import json, torch, collective.torch as hvd
hvd.init()
model = torch.nn.Linear(3, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
readings = [opt.communication_wait_s]
for _ in range(3):
    opt.zero_grad()
    model(torch.ones(4, 3)).sum().backward()
    opt.step()
    readings.append(opt.communication_wait_s)
opt.zero_grad()
model(torch.ones(4, 3)).sum().backward()
opt.synchronize()                         # called on its own (before clipping), then a step that skips it
readings.append(opt.communication_wait_s)
with opt.skip_synchronize():
    opt.step()
readings.append(opt.communication_wait_s)
print(json.dumps(readings))
"""


def test_each_synchronize_adds_its_wait_and_a_skipped_one_adds_nothing() -> None:
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120, check=True)
    readings = json.loads(out.stdout.strip().splitlines()[-1])
    assert readings[0] == 0.0
    assert all(later > earlier for earlier, later in zip(readings[:5], readings[1:5]))
    assert readings[5] == readings[4]
