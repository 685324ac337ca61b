"""A rank of the launcher job the rendezvous tests attack: rank 0 tells the test where the rendezvous is, every rank
waits at the gate (a FIFO the test writes to once its attack is up), then the job runs: init() meets the peers
through the rendezvous, a few allreduces, shutdown."""

import sys

import numpy as np

import collective
from collective.config import config_from_env


def main() -> int:
    config = config_from_env()
    if config.rank == 0:
        print(f"RENDEZVOUS {config.rendezvous} {config.secret.hex()}", flush=True)
    with open(sys.argv[1], "rb", buffering=0) as gate:  # unbuffered: take one byte, leave the other rank its own
        gate.read(1)
    collective.init()
    total = None
    for _ in range(5):
        total = collective.allreduce(np.full(1024, float(collective.rank())), op=collective.Sum)
    print(f"RESULT {float(total[0])}", flush=True)
    collective.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
