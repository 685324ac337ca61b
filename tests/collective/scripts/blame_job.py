"""A rank program for blame tests: ``blame_job.py MODE VICTIM [SURVIVORS]``.

Every rank joins and meets the others; then the victim fails as MODE says (``raise``, ``sigkill`` or
``sigstop``) while the others keep allreducing until they notice, print whom they blame, and re-raise
(SURVIVORS ``raise``, the default) or exit with code 3 as many training scripts do (``exit``).
"""

import os
import signal
import sys

import numpy as np

import collective


def main() -> None:
    mode, victim = sys.argv[1], int(sys.argv[2])
    survivors = sys.argv[3] if len(sys.argv) > 3 else "raise"
    collective.init()
    collective.barrier()
    if collective.rank() == victim:
        if mode == "raise":
            raise ValueError(f"rank {victim} gives up")
        os.kill(os.getpid(), {"sigkill": signal.SIGKILL, "sigstop": signal.SIGSTOP}[mode])
    try:
        while True:
            collective.allreduce(np.ones(16))
    except collective.CollectiveError as e:
        print(f"rank {collective.rank()} noticed {type(e).__name__} naming rank={e.rank}", flush=True)
        if survivors == "exit":
            sys.exit(3)
        raise


if __name__ == "__main__":
    main()
