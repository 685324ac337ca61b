"""Rank 1 dies right after init while rank 0 waits in an allreduce: the job must end, not hang."""

from __future__ import annotations

import os
import sys

import numpy as np

import collective


def main() -> None:
    collective.init(timeout_s=30)
    if collective.rank() == 1:
        os._exit(3)
    try:
        collective.allreduce(np.ones(1000), name="never.completes")
    except collective.CollectiveError as e:
        print(f"rank 0 saw: {type(e).__name__}: {e}", flush=True)
        sys.exit(4)


if __name__ == "__main__":
    main()
