"""Leaves and rejoins the job ``--resets`` times in one process, as ``hvd.elastic.run`` does after a lost
peer, and reports what the process holds (threads, open fds, its shared-memory segments) after the fifth
re-form and after the last. Every second re-form follows a peer failure: rank 1 leaves in the middle, and
rank 0's next collective must fail with a peer-loss error. The test acts as the elastic driver."""

import argparse
import glob
import json
import os

import torch

import collective.torch as hvd
from collective.elastic.errors import is_peer_loss
from collective.elastic.membership import joined_round
from collective.elastic.run import Lifecycle, reform

parser = argparse.ArgumentParser()
parser.add_argument("--resets", type=int, default=100)
args = parser.parse_args()


def _thread_name(task: str) -> str:
    try:
        with open(f"/proc/self/task/{task}/comm") as comm:
            return comm.read().strip()
    except FileNotFoundError:
        return "(ended while counted)"


def held() -> dict:
    # A segment is unlinked once both sides have opened it; its mapping stays until the mesh closes it.
    with open("/proc/self/maps") as maps:
        shm_maps = sum("/dev/shm/shvd-" in line for line in maps)
    return {"threads": sorted(_thread_name(task) for task in os.listdir("/proc/self/task")),
            "fds": len(os.listdir("/proc/self/fd")),
            "shm_names": len(glob.glob(f"/dev/shm/shvd-{os.getpid()}-*")), "shm_maps": shm_maps}


lifecycle = Lifecycle(shutdown=hvd.shutdown, init=hvd.init)
hvd.init()
baseline = None
peer_failures = 0
for i in range(args.resets):
    total = hvd.allreduce(torch.ones(100_000), op=hvd.Sum, name=f"data{i}")
    assert total[0].item() == hvd.size(), total[0]
    if i % 2 == 1:
        if hvd.rank() == 1:
            hvd.shutdown()  # leaves while rank 0 still expects it
        else:
            try:
                hvd.allreduce(torch.ones(4), name=f"after-leave{i}")
            except Exception as error:  # noqa: BLE001 - what the elastic wrapper would see
                if not is_peer_loss(error):
                    raise
                peer_failures += 1
            else:
                raise AssertionError(f"reset {i}: a collective with a departed peer succeeded")
    print(f"LEFT {joined_round()}", flush=True)
    reform(lifecycle)
    if i == 4:
        baseline = held()
final = held()
# A peer that shuts down ends this rank's engine thread too: no rank leaves before every rank has counted.
hvd.barrier()
print("HELD " + json.dumps({"baseline": baseline, "final": final, "peer_failures": peer_failures,
                            "round": joined_round()}), flush=True)
hvd.shutdown()
