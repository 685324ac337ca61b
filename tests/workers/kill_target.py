"""Loops large allreduces until a peer is SIGKILLed by the test, then reports the error and when it came."""

from __future__ import annotations

import sys
import time

import numpy as np

import collective as hvd
from collective.runtime import start_engine
from common import report


def main() -> None:
    hvd.init(enable_shm=(sys.argv[1] == "shm"), timeout_s=60)
    if sys.argv[2:] == ["engine"]:
        start_engine()
    data = np.ones(4_000_000, np.float32)
    print("looping", flush=True)
    try:
        while True:
            hvd.allreduce_(data, op=hvd.Max, name="loop")
    except hvd.PeerFailureError as exc:
        report(kind="peer-failure", at=time.time(), rank=exc.rank, message=str(exc))
    except hvd.CollectiveError as exc:
        report(kind="other-error", at=time.time(), type=type(exc).__name__, message=str(exc))


if __name__ == "__main__":
    main()
