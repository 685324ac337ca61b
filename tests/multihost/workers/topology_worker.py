"""One rank on an emulated host: reports its topology, its transports and an allreduce's correctness.

    python topology_worker.py [COUNT]
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workers"))
from common import expected_reduction, rank_input, report, tolerance  # noqa: E402

import collective as hvd  # noqa: E402
from collective import runtime  # noqa: E402

if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    results = {}
    for dtype in (np.dtype(np.int32), np.dtype(np.float32)):
        mine = rank_input(rank, count, dtype, "Sum")
        got = hvd.allreduce(mine, op=hvd.Sum)
        want = expected_reduction([rank_input(r, count, dtype, "Sum") for r in range(size)], "Sum", dtype, size)
        if dtype.kind == "i":
            results[dtype.name] = bool(np.array_equal(got, want))
        else:
            results[dtype.name] = bool(np.allclose(got, want, rtol=tolerance(dtype, size), atol=1e-3))
    report(rank=rank, size=size, hostname=socket.gethostname(), mesh_host=runtime.current().host,
           local_rank=hvd.local_rank(), local_size=hvd.local_size(), cross_rank=hvd.cross_rank(),
           cross_size=hvd.cross_size(),
           shm={str(peer): hvd.uses_shared_memory(peer) for peer in range(size) if peer != rank},
           allreduce_ok=results)
    hvd.shutdown()
