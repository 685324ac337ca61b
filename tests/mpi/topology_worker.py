"""Reports collective's view of this rank next to MPI's own (COMM_WORLD and the shared-memory split)."""

from __future__ import annotations

import json

from mpi4py import MPI

import collective


QUERIES = ["mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built", "cuda_built", "rocm_built",
           "ccl_built", "ddl_built", "mpi_threads_supported", "is_homogeneous"]


def main() -> None:
    collective.init()
    world = MPI.COMM_WORLD
    node = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.Get_rank())
    record = {
        "ours": [collective.rank(), collective.size(), collective.local_rank(), collective.local_size(),
                 collective.cross_rank(), collective.cross_size()],
        "mpi": [world.Get_rank(), world.Get_size(), node.Get_rank(), node.Get_size()],
        "thread_multiple": MPI.Query_thread() == MPI.THREAD_MULTIPLE,
        "queries": {name: getattr(collective, name)() for name in QUERIES},
    }
    node.Free()
    print("RESULT " + json.dumps(record), flush=True)
    collective.shutdown()


if __name__ == "__main__":
    main()
