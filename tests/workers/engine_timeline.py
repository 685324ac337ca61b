"""The engine's timeline under either backend (run by tests/mpi under mpiexec): one given to init, then
start_timeline/stop_timeline at run time. Rank 0 reads both files back and reports what they hold.

argv[1], argv[2]: the init timeline's path and the run-time one's.
"""

from __future__ import annotations

import json
import os
import sys

import torch

import collective.torch as hvd
from common import report


def summary(path: str) -> dict[str, object]:
    with open(path, encoding="utf-8") as trace:
        events = json.load(trace)  # stopped: the file is complete, valid JSON
    rows = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    return {
        "rows": sorted(rows.values()),
        "phases": sorted({e["name"] for e in spans}),
        "orphans": [e["name"] for e in spans if e["tid"] not in rows],
        "bad_spans": [e["name"] for e in spans if e["dur"] < 0 or e["ts"] < 0],
        "cycles": sum(1 for e in events if e.get("name") == "CYCLE_START"),
        "process": [e["args"]["name"] for e in events if e.get("name") == "process_name"],
        "fused": sorted({e["args"]["detail"] for e in spans if e["name"] == "ALLREDUCE" and "args" in e}),
    }


def main() -> None:
    at_init, at_run = sys.argv[1], sys.argv[2]
    hvd.init(timeline=at_init)
    rank = hvd.rank()
    hvd.allreduce(torch.ones(4), name="from.init")  # the first collective starts the engine
    hvd.start_timeline(at_run, mark_cycles=True)  # switches files: the init one is closed
    handles = [hvd.allreduce_async(torch.full((8,), float(rank + i)), op=hvd.Sum, name=f"fused.{i}") for i in range(8)]
    sums = [hvd.synchronize(h) for h in handles]
    hvd.broadcast(torch.arange(3), root_rank=0, name="traced.broadcast")
    hvd.allgather(torch.ones(rank + 1, 2), name="traced.allgather")
    hvd.stop_timeline()
    hvd.allreduce(torch.ones(2), name="after.stop")
    size = hvd.size()
    right = all(s.tolist() == [float(sum(r + i for r in range(size)))] * 8 for i, s in enumerate(sums))
    hvd.shutdown()
    if rank != 0:
        report(kind="timeline", rank=rank, files=[os.path.exists(p) for p in (at_init, at_run)], right=right)
        return
    report(kind="timeline", rank=rank, right=right, at_init=summary(at_init), at_run=summary(at_run))


if __name__ == "__main__":
    main()
