"""Rank 0 makes a 128-byte id; every rank reports what exchange_unique_id gave it.

argv[1]: "direct" (collectives on the communicator) or "engine" (through the background engine).
"""

from __future__ import annotations

import hashlib
import json
import sys

import collective
from collective.nccl import exchange_unique_id
from collective.runtime import start_engine


def made_on_rank_zero() -> bytes:
    # Stands in for ncclGetUniqueId, which needs no GPU but does need libnccl; any 128 bytes do here.
    return b"".join(hashlib.sha256(f"id-{i}".encode()).digest() for i in range(4))


def main() -> None:
    collective.init()
    if sys.argv[1] == "engine":
        start_engine()
    got = exchange_unique_id(made_on_rank_zero, collective.rank())
    again = exchange_unique_id(lambda: bytes(range(128)), collective.rank(), name="nccl.unique_id.2")
    print("RESULT " + json.dumps({"id": got.hex(), "again": again.hex(), "want": made_on_rank_zero().hex()}),
          flush=True)
    collective.shutdown()


if __name__ == "__main__":
    main()
