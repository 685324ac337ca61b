"""Reports how many peers this rank holds connections to after init, and after engine allreduces that go
round the ring (large tensors) with the coordinator's negotiation (every rank with rank 0).

argv: transport (shm/tcp)."""

from __future__ import annotations

import sys

import numpy as np

import collective as hvd
from collective.runtime import communicator, start_engine
from common import report


def main() -> None:
    hvd.init(enable_shm=(sys.argv[1] == "shm"), timeout_s=60)
    after_init = communicator().connected_peers()
    start_engine()
    data = np.ones(1 << 20, np.float32)  # far above the size that goes to every peer at once
    for _ in range(3):
        hvd.allreduce_(data, op=hvd.Sum, name="ring")
    ok = bool(np.all(data == hvd.size() ** 3))
    report(after_init=after_init, after_engine=communicator().connected_peers(), ok=ok)
    hvd.shutdown()


if __name__ == "__main__":
    main()
