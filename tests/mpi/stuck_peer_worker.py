"""Rank 1 never starts its engine; rank 0's engine must give up after timeout_s with a clear error.

Rank 1 waits for rank 0's verdict on a plain MPI message and says it has printed it; then both leave
without MPI_Finalize (rank 0 still has the abandoned negotiation request pending).
"""

from __future__ import annotations

import json
import os

import numpy as np
from mpi4py import MPI

import collective
from collective.runtime import start_engine


def main() -> None:
    collective.init(backend="mpi", timeout_s=3)
    world = MPI.COMM_WORLD
    if collective.rank() == 0:
        start_engine()
        try:
            collective.allreduce(np.ones(10), name="lonely")
            verdict = {"error": None}
        except collective.CollectiveError as e:
            verdict = {"error": type(e).__name__, "message": str(e)}
        print("RESULT " + json.dumps(verdict), flush=True)
        world.send(verdict, dest=1, tag=7)
        # mpiexec ends the whole job when a rank leaves without MPI_Finalize: wait until rank 1 has spoken.
        world.recv(source=1, tag=8)
    else:
        print("RESULT " + json.dumps({"saw": world.recv(source=0, tag=7)}), flush=True)
        world.send("printed", dest=0, tag=8)
    os._exit(0)


if __name__ == "__main__":
    main()
