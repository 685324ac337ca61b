"""A rank program for launcher tests; argv[1] picks the behaviour, argv[2] is a pid directory.

Ranks learn their identity only through collective.config, like real programs, and use the
rendezvous bootstrap to make sure every rank is alive before a failure is staged.
"""

import os
import select
import signal
import sys

from collective.bootstrap import bootstrap_from_config
from collective.config import config_from_env

HANG_S = 120.0  # far beyond any test timeout: only the launcher's teardown ends these ranks


def hang() -> None:
    select.select([], [], [], HANG_S)


def all_ranks_ready(pid_dir: str) -> int:
    """Records our pid, then waits until every rank has, so staged failures hit live peers."""
    config = config_from_env()
    with open(os.path.join(pid_dir, f"rank{config.rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    with bootstrap_from_config(config) as bootstrap:
        bootstrap.allgather(str(os.getpid()).encode(), timeout_s=30.0)
    print(f"ready {config.rank}", flush=True)
    return config.rank


def main() -> int:
    mode = sys.argv[1]
    if mode == "print":
        config = config_from_env()
        print(f"hello from rank {config.rank} of {config.size}")
        return 0
    if mode == "partial":
        rank = config_from_env().rank
        sys.stdout.write(f"first line {rank}\npartial out {rank}")
        sys.stderr.write(f"partial err {rank}")
        return 0
    if mode == "stubborn":
        # Before the readiness barrier, so the teardown SIGTERM can never beat it.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    rank = all_ranks_ready(sys.argv[2])
    if mode == "fail":
        if rank == 1:
            return 3
        hang()
    elif mode == "sigkill":
        if rank == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        hang()
    elif mode == "stubborn":
        if rank == 1:
            return 5
        hang()
    elif mode == "hang":
        hang()
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
