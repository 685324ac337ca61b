"""The Keras DistributedOptimizer's communication_wait_s: the seconds its steps waited for the allreduces."""

from __future__ import annotations

import json
import subprocess
import sys

# One rank, in its own process (these tests' process must stay uninitialised).
_SCRIPT = """
import json, numpy as np, keras, collective.keras as hvd
hvd.init()
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
other = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
readings = [opt.communication_wait_s]
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(optimizer=opt, loss="mse")
for _ in range(2):
    model.fit(np.ones((16, 3)), np.ones((16, 1)), batch_size=4, epochs=1, verbose=0)
    readings.append(opt.communication_wait_s)
print(json.dumps({"readings": readings, "other": other.communication_wait_s}))
"""


def test_the_steps_inside_model_fit_add_their_wait_to_their_own_optimizer_only() -> None:
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    readings = result["readings"]
    assert readings[0] == 0.0 and readings[1] > 0.0 and readings[2] > readings[1]
    assert result["other"] == 0.0
