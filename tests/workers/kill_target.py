"""Loops large allreduces until a peer is SIGKILLed by the test, then reports the error and when it came.

argv: transport (shm/tcp), mode (direct/engine; or leave: rank 1 shuts down at once, in order, and
reports when, while the others loop direct), and optionally a host layout (one host name per rank,
comma-separated): the ranks then take those host keys and the hierarchical allreduce."""

from __future__ import annotations

import sys
import time

import numpy as np

import collective as hvd
from collective.config import config_from_env
from collective.runtime import start_engine
from common import report


def main() -> None:
    layout = sys.argv[3].split(",") if len(sys.argv) > 3 else None
    hosts = {} if layout is None else {"host_key": f"emulated-{layout[config_from_env().rank]}",
                                       "hierarchical_allreduce": True}
    hvd.init(enable_shm=(sys.argv[1] == "shm"), timeout_s=60, **hosts)
    if sys.argv[2:3] == ["engine"]:
        start_engine()
    if sys.argv[2:3] == ["leave"] and hvd.rank() == 1:
        hvd.shutdown()
        report(kind="left", at=time.time())
        return
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
