"""Rank 1 withholds a tensor that rank 0 has submitted, until the test writes to a FIFO.

argv: mode ("warn" or "deadline"), FIFO path. Run directly (tests/jobs.py ManualJob), so the test can
read rank 0's output while the job runs and release rank 1 only once it has seen what it expects.
  warn:     stall warning after 1 s; then rank 1 submits and both complete.
  deadline: stall shutdown after 1 s; rank 0's handle fails naming rank 1, which never submits.
  leave:    rank 1 shuts down (once released) while rank 0 waits on a tensor it never submits; rank 0's
            error names rank 1 and the call it cut short.
  crossed:  a program-order bug: each rank waits on a tensor the other never submits (no FIFO); the stall
            shutdown (2 s) fails both, each naming the other rank (a rank whose peer failed first and shut
            down gets a PeerFailureError that names the peer and its own pending call).
"""

from __future__ import annotations

import sys

import torch

import collective.torch as hvd
from common import report


def wait_for_release(fifo: str) -> None:
    # Opening a FIFO for reading blocks until the test opens it for writing; read() until it closes it.
    with open(fifo, encoding="utf-8") as released:
        released.read()


def main() -> None:
    mode, fifo = sys.argv[1], sys.argv[2]
    if mode == "crossed":
        hvd.init(stall_check_s=1, stall_shutdown_s=2)
        try:
            hvd.allreduce(torch.ones(4), op=hvd.Sum, name=f"order.{hvd.rank()}")
            report(mode=mode, error="")
        except (hvd.CollectiveTimeoutError, hvd.PeerFailureError) as exc:
            # The coordinator times out one name a round before the other when their submits straddle a
            # round; the rank whose call failed first then shuts down, and that is what the other sees.
            report(mode=mode, error=str(exc), rank=exc.rank)
        hvd.shutdown()
        return
    if mode == "leave":
        hvd.init(stall_check_s=1)
        if hvd.rank() != 0:
            wait_for_release(fifo)
        else:
            try:
                hvd.allreduce(torch.ones(4), op=hvd.Sum, name="left.behind")
                report(mode=mode, error="")
            except hvd.PeerFailureError as exc:
                report(mode=mode, error=str(exc), rank=exc.rank)
        hvd.shutdown()
        return
    if mode == "warn":
        hvd.init(stall_check_s=1)
    else:
        hvd.init(stall_check_s=1, stall_shutdown_s=1)
    name = "stalled.grad" if mode == "warn" else "abandoned.grad"
    if hvd.rank() != 0:
        wait_for_release(fifo)
        if mode == "warn":
            out = hvd.allreduce(torch.ones(4), op=hvd.Sum, name=name)
            report(mode=mode, result=out.tolist())
    else:
        try:
            out = hvd.allreduce(torch.ones(4), op=hvd.Sum, name=name)
            report(mode=mode, result=out.tolist())
        except hvd.CollectiveTimeoutError as exc:
            report(mode=mode, error=str(exc))
    hvd.shutdown()


if __name__ == "__main__":
    main()
