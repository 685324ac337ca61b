"""Loops allreduces with a short timeout until the test SIGSTOPs a peer, then reports the error it got.

argv: shm|tcp, direct|engine, the collective timeout in seconds.
"""

from __future__ import annotations

import sys

import numpy as np

import collective as hvd
from collective.runtime import start_engine
from common import report


def main() -> None:
    hvd.init(enable_shm=(sys.argv[1] == "shm"), timeout_s=float(sys.argv[3]))
    if sys.argv[2] == "engine":
        start_engine()
    data = np.ones(1 << 20, np.float32)
    print("looping", flush=True)
    try:
        while True:
            hvd.allreduce_(data, op=hvd.Max, name="loop")
    except hvd.CollectiveError as exc:
        report(type=type(exc).__name__, rank=getattr(exc, "rank", None), message=str(exc))


if __name__ == "__main__":
    main()
