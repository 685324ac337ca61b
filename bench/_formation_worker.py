"""One rank of the formation benchmark (see bench/formation.py, which starts it).

    python _formation_worker.py {ours,gloo} LARGE_ELEMENTS

Times its own init (the clock read right before and right after it), counts what the rank holds after
forming and after one small and one large allreduce (socket descriptors, RSS, shared memory mapped), and
sends all of it to rank 0 in one allgather, which prints one line: ``@@formation {json}``.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

MARKER = "@@formation "


def held() -> dict[str, float]:
    """Socket descriptors, resident memory (MiB), and shared memory mapped from /dev/shm (MiB: its size,
    and what of it is resident)."""
    fds = os.listdir("/proc/self/fd")
    sockets = 0
    for fd in fds:
        try:
            sockets += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    rss_kib = shm_kib = shm_rss_kib = 0
    in_shm = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if fields and "-" in fields[0] and len(fields) >= 5:
                in_shm = len(fields) >= 6 and fields[5].startswith("/dev/shm/")
            elif fields[0] == "Size:" and in_shm:
                shm_kib += int(fields[1])
            elif fields[0] == "Rss:":
                rss_kib += int(fields[1])
                shm_rss_kib += int(fields[1]) if in_shm else 0
    return {"sockets": sockets, "rss_mib": rss_kib / 1024, "shm_mib": shm_kib / 1024, "shm_rss_mib": shm_rss_kib / 1024}


class Ours:
    def init(self) -> None:
        import collective
        from collective import runtime

        # Where the time goes: the mesh's own part (dials, handshakes, shared memory) against the rest of
        # init (the rendezvous allgather of the listeners' addresses, before it).
        connect_mesh, from_config = runtime.connect_mesh, runtime.bootstrap_from_config
        # When this rank: reached the rendezvous server, began its mesh, finished it.
        self.mesh_span = [0.0, 0.0, 0.0]

        def timed_connect_mesh(*args: object, **kwargs: object) -> object:
            self.mesh_span[1] = time.time()
            try:
                return connect_mesh(*args, **kwargs)
            finally:
                self.mesh_span[2] = time.time()

        def timed_bootstrap(*args: object, **kwargs: object) -> object:
            try:
                return from_config(*args, **kwargs)
            finally:
                self.mesh_span[0] = time.time()

        runtime.connect_mesh, runtime.bootstrap_from_config = timed_connect_mesh, timed_bootstrap
        self.c = collective
        collective.init()
        runtime.connect_mesh, runtime.bootstrap_from_config = connect_mesh, from_config
        self.rank, self.size = collective.rank(), collective.size()

    def allreduce(self, data: np.ndarray) -> None:
        self.c.allreduce_(data, op=self.c.Sum)

    def allgather(self, row: np.ndarray) -> np.ndarray:
        return self.c.allgather(row[None, :])

    def connected(self) -> int:
        from collective.runtime import communicator

        count = getattr(communicator(), "connected_peers", None)  # absent before lazy connection
        return count() if count else self.size - 1

    def finish(self) -> None:
        self.c.shutdown()


class Gloo:
    mesh_span = [0.0, 0.0, 0.0]

    def init(self) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        dist.init_process_group("gloo")
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def allreduce(self, data: np.ndarray) -> None:
        self.dist.all_reduce(self.torch.from_numpy(data))

    def allgather(self, row: np.ndarray) -> np.ndarray:
        out = [self.torch.zeros(len(row), dtype=self.torch.float64) for _ in range(self.size)]
        self.dist.all_gather(out, self.torch.from_numpy(row))
        return np.stack([t.numpy() for t in out])

    def connected(self) -> int:
        return -1

    def finish(self) -> None:
        self.dist.destroy_process_group()


def main() -> None:
    side, large = sys.argv[1], int(sys.argv[2])
    backend = Ours() if side == "ours" else Gloo()
    if side == "ours":
        import collective  # noqa: F401  imported before the clock starts, as torch is for gloo
    else:
        import torch.distributed  # noqa: F401
    entered = time.time()
    backend.init()
    left = time.time()
    formed = held()
    connected = backend.connected()
    small = np.ones(256, np.float32)
    began = time.time()
    backend.allreduce(small)  # ours: it connects the pairs it needs (every pair, for a small call today)
    small_s = time.time() - began
    after_small = held()
    big = np.ones(large, np.float32)
    backend.allreduce(big)
    after_large = held()
    keys = ["sockets", "rss_mib", "shm_mib", "shm_rss_mib"]
    stages = [d[k] for d in (formed, after_small, after_large) for k in keys]
    row = np.array([entered, left, connected, *backend.mesh_span, small_s, *stages], np.float64)
    rows = backend.allgather(row)
    if backend.rank == 0:
        record = {"side": side, "size": backend.size, "ok": bool(small[0] == backend.size and big[-1] == backend.size),
                  "formation_s": float(rows[:, 1].max() - rows[:, 0].max()),
                  "init_s_max": float((rows[:, 1] - rows[:, 0]).max()),
                  "connected_mean": float(rows[:, 2].mean()),
                  # ours only: the mesh's part of init (max over ranks), and the rendezvous before it (the
                  # last rank starting its mesh, from the last rank entering init)
                  # each as the last rank reaching that point, from the last rank entering init
                  "reached_server_s": float(rows[:, 3].max() - rows[:, 0].max()),
                  "mesh_begun_s": float(rows[:, 4].max() - rows[:, 0].max()),
                  "mesh_done_s": float(rows[:, 5].max() - rows[:, 0].max()),
                  "mesh_s_max": float((rows[:, 5] - rows[:, 4]).max()),
                  "first_small_allreduce_s_max": float(rows[:, 6].max())}
        for i, stage in enumerate(("formed", "small", "large")):
            for j, k in enumerate(keys):
                column = rows[:, 7 + 4 * i + j]
                record[f"{stage}_{k}_mean"] = float(column.mean())
                record[f"{stage}_{k}_max"] = float(column.max())
        print(MARKER + json.dumps(record), flush=True)
        if sys.argv[3:4] == ["dump"]:  # per rank: entered, at the server, mesh begun, mesh done, left
            base = rows[:, 0].max()
            for r, row in enumerate(rows):
                print(r, " ".join(f"{t - base:+.3f}" for t in (row[0], row[3], row[4], row[5], row[1])), flush=True)
    backend.finish()


if __name__ == "__main__":
    main()
