"""A many-rank job that loops collectives until a peer fails, then reports the error and when it came
(tests/scale).

argv: mode, culprit rank, collective timeout in seconds, FIFO path (stall modes).
  kill:         every rank loops direct allreduces; the test SIGKILLs the culprit.
  stall:        the culprit stops calling collectives: it blocks reading the FIFO until the test, having
                the others' reports, opens and closes it. The others loop direct allreduces, so they time
                out, and must name the culprit, not the neighbour they were waiting on.
  engine-stall: as stall, through the engine: the others submit named allreduces the culprit never does,
                and the stall inspector fails them naming it.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import collective as hvd
from collective.runtime import start_engine
from common import report


def main() -> None:
    mode, culprit, timeout_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    engine = mode == "engine-stall"
    hvd.init(timeout_s=timeout_s, connect_timeout_s=300, stall_check_s=timeout_s / 4 if engine else 60,
             stall_shutdown_s=timeout_s if engine else 300)
    if engine:
        start_engine()
    rank, size = hvd.rank(), hvd.size()
    # One checked collective first: the job is whole, and every rank has its mesh up before the failure.
    total = hvd.allreduce(np.array([rank], np.int64), op=hvd.Sum, name="whole")
    if int(total[0]) != size * (size - 1) // 2:
        report(kind="wrong-sum", got=int(total[0]))
        return
    print("looping", flush=True)
    if rank == culprit and mode != "kill":
        # The stall: opening blocks until the test opens the FIFO for writing, read() until it closes it.
        with open(sys.argv[4], encoding="utf-8") as released:
            released.read()
        report(kind="released", at=time.time())
        return
    data = np.full(16 << 10, rank, np.float32)  # 64 KiB: past the small calls, so the ring moves it
    step, since = 0, time.time()
    try:
        while True:
            hvd.allreduce_(data, op=hvd.Max, name=f"loop.{step}")
            step += 1
    except hvd.PeerFailureError as exc:
        report(kind="peer-failure", at=time.time(), since=since, rank=exc.rank, message=str(exc), steps=step)
    except hvd.CollectiveError as exc:
        report(kind=type(exc).__name__, at=time.time(), since=since, rank=getattr(exc, "rank", None),
               message=str(exc), steps=step)


if __name__ == "__main__":
    main()
