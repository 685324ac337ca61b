"""Rank 1 leaves the job in order (shutdown, a goodbye) while rank 0 waits on it in a collective.

argv: transport (shm/tcp). Rank 0 reports the error it got and how long after rank 1's goodbye it came."""

from __future__ import annotations

import sys
import time

import numpy as np

import collective as hvd
from common import report


def main() -> None:
    hvd.init(enable_shm=(sys.argv[1] == "shm"), timeout_s=60)
    if hvd.rank() == 1:
        hvd.shutdown()
        report(kind="left", at=time.time())
        return
    try:
        hvd.allreduce(np.ones(1 << 16, np.float32), name="after.the.goodbye")
        report(kind="completed", at=time.time())
    except hvd.PeerFailureError as exc:
        report(kind="peer-failure", at=time.time(), rank=exc.rank, message=str(exc))
    except hvd.CollectiveError as exc:
        report(kind="other-error", at=time.time(), type=type(exc).__name__, message=str(exc))


if __name__ == "__main__":
    main()
