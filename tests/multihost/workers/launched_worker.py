"""One rank started by ``collective.run -H``: reports where it runs, its topology and an allreduce; with
``--fail-rank R`` rank R exits 3 while the others block until the launcher stops them."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workers"))
from common import report  # noqa: E402

import numpy as np  # noqa: E402

import collective as hvd  # noqa: E402

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail-rank", type=int, default=None)
    args = parser.parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    total = hvd.allreduce(np.array([rank + 1], dtype=np.int64), op=hvd.Sum)
    report(rank=rank, pid=os.getpid(), hostname=socket.gethostname(), local_rank=hvd.local_rank(),
           local_size=hvd.local_size(), cross_rank=hvd.cross_rank(), cross_size=hvd.cross_size(),
           shm={str(p): hvd.uses_shared_memory(p) for p in range(size) if p != rank}, total=int(total[0]),
           horovod_local_rank=os.environ.get("HOROVOD_LOCAL_RANK"))
    if args.fail_rank is not None:
        if rank == args.fail_rank:
            print(f"rank {rank} fails on purpose", file=sys.stderr, flush=True)
            sys.exit(3)
        threading.Event().wait()  # blocks until the launcher stops this rank
    hvd.shutdown()
