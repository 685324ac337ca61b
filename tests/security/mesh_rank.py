"""A rank process for the hostile-peer tests: a real collective.init() whose bootstrap is the test itself.

The rank prints its mesh record and blocks on stdin until the test answers with every rank's record,
so the test knows each listener's port and can have its strangers in place before any rank connects.
argv: the allreduce's element count, then "fd-headroom N" to leave this rank only N free file
descriptors while the mesh forms (the test of a listener at its open-file limit), or "live": the rank
prints "FORMED" once the mesh has formed and runs allreduces until the test writes a line to its stdin
(the test of strangers on the listener of a running job, which stays open for the life of the mesh).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time

import numpy as np

import collective as hvd
from collective.bootstrap.base import Bootstrap, FixedMembership


class StdioBootstrap(FixedMembership, Bootstrap):
    """Exchanges the mesh records through the test: one line out on stdout, one line back on stdin."""

    original_fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)

    def __init__(self, rank: int, size: int, fd_headroom: int | None) -> None:
        self._rank, self._size, self._fd_headroom = rank, size, fd_headroom

    def allgather(self, payload: bytes, timeout_s: float) -> list[bytes]:
        print("GATHER " + payload.hex(), flush=True)
        line = sys.stdin.readline()
        if not line:
            raise TimeoutError("the test closed stdin before sending the records")
        if self._fd_headroom is not None:
            # Counted after the last descriptor init() opens before the mesh accepts (the listener is bound).
            in_use = len(os.listdir("/proc/self/fd"))
            resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + self._fd_headroom, self.original_fd_limit[1]))
        return [bytes.fromhex(h) for h in json.loads(line)]

    def local_address(self) -> str | None:
        return "127.0.0.1"


def main() -> None:
    count = int(sys.argv[1])
    fd_headroom = int(sys.argv[3]) if sys.argv[2:3] == ["fd-headroom"] else None
    rank, size = int(os.environ["COLLECTIVE_RANK"]), int(os.environ["COLLECTIVE_SIZE"])
    started = time.monotonic()
    try:
        hvd.init(bootstrap=StdioBootstrap(rank, size, fd_headroom))
    except hvd.CollectiveError as exc:
        print("ERROR " + json.dumps({"type": type(exc).__name__, "rank": exc.rank, "message": str(exc)}), flush=True)
        sys.exit(1)
    formed = time.monotonic()
    if fd_headroom is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, StdioBootstrap.original_fd_limit)
    expected = size * (size + 1) / 2
    if sys.argv[2:3] == ["live"]:
        print("RESULT " + json.dumps(run_until_told(count, rank, expected)), flush=True)
        hvd.shutdown()
        return
    data = np.full(count, rank + 1.0, np.float32)
    hvd.allreduce_(data, op=hvd.Sum, name="hostile")
    print("RESULT " + json.dumps({"ok": bool(np.all(data == expected)), "mesh_s": formed - started}), flush=True)
    hvd.shutdown()


def run_until_told(count: int, rank: int, expected: float) -> dict:
    """Allreduces until the test writes a line to stdin; every rank stops after the same call, as the
    ranks agree on stopping through the allreduce itself."""
    told = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), told.set()), daemon=True).start()
    print("FORMED", flush=True)
    calls, ok = 0, True
    while True:
        data = np.full(count + 1, rank + 1.0, np.float32)
        data[-1] = 1.0 if told.is_set() else 0.0
        hvd.allreduce_(data, op=hvd.Sum, name="live")
        calls += 1
        ok &= bool(np.all(data[:-1] == expected))
        if data[-1] > 0:
            return {"ok": ok, "calls": calls}


if __name__ == "__main__":
    main()
