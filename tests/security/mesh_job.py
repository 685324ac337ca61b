"""Starts the ranks of tests/security/mesh_rank.py and plays their bootstrap, so that a test can put
hostile connections in front of every mesh listener before any rank dials a peer.

Every wait has a deadline, and every rank process is killed when the job is closed.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from collective.config import ENV_ADVERTISE_HOST, ENV_CONNECT_TIMEOUT, ENV_RANK, ENV_SECRET, ENV_SIZE

MESH_RANK = Path(__file__).resolve().parent / "mesh_rank.py"


def _pump(stream: IO[str], lines: "queue.Queue[str | None]") -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)


class MeshJob:
    """One job of `size` real rank processes on loopback, held at the bootstrap until released."""

    def __init__(self, size: int, count: int = 1 << 16, env: dict[str, str] | None = None,
                 rank_args: dict[int, list[str]] | None = None, secret: bytes | None = None,
                 connect_timeout_s: float = 60.0) -> None:
        self.secret = secret or secrets.token_bytes(32)
        base = {k: v for k, v in os.environ.items() if not k.startswith("COLLECTIVE_")}
        self.procs: list[subprocess.Popen[str]] = []
        self.stdout: list[queue.Queue[str | None]] = []
        self.stderr: list[list[str]] = []
        self._pumps: list[threading.Thread] = []
        self.released_at = 0.0
        for rank in range(size):
            rank_env = {**base, ENV_RANK: str(rank), ENV_SIZE: str(size), ENV_SECRET: self.secret.hex(),
                        ENV_ADVERTISE_HOST: "127.0.0.1", ENV_CONNECT_TIMEOUT: str(connect_timeout_s),
                        "PYTHONUNBUFFERED": "1", **(env or {})}
            args = (rank_args or {}).get(rank, [])
            proc = subprocess.Popen([sys.executable, str(MESH_RANK), str(count), *args], env=rank_env, text=True,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
            self.procs.append(proc)
            out: queue.Queue[str | None] = queue.Queue()
            err: list[str] = []
            self._pumps += [threading.Thread(target=_pump, args=(proc.stdout, out), daemon=True),
                            threading.Thread(target=lambda s=proc.stderr, e=err: e.extend(s), daemon=True)]
            self._pumps[-2].start()
            self._pumps[-1].start()
            self.stdout.append(out)
            self.stderr.append(err)
        self._records: list[str] = []

    def _next_line(self, rank: int, prefix: str, deadline: float) -> str:
        while True:
            try:
                line = self.stdout[rank].get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"rank {rank} printed no {prefix!r} line in time:\n{self.output(rank)}") from None
            if line is None:
                self.procs[rank].wait(timeout=10)
                raise AssertionError(f"rank {rank} exited ({self.procs[rank].returncode}) before printing "
                                     f"{prefix!r}:\n{self.output(rank)}")
            if line.startswith(prefix):
                return line[len(prefix):]
            if line.startswith("ERROR "):
                raise AssertionError(f"rank {rank} failed: {line[6:]}")

    def listeners(self, timeout_s: float = 60.0) -> list[tuple[str, int]]:
        """Waits until every rank has bound its mesh listener; returns each one's (host, port)."""
        deadline = time.monotonic() + timeout_s
        self._records = [self._next_line(rank, "GATHER ", deadline) for rank in range(len(self.procs))]
        peers = [json.loads(bytes.fromhex(r)) for r in self._records]
        return [(p["host"], int(p["port"])) for p in peers]

    def release(self, ranks: list[int] | None = None, dial: dict[int, int] | None = None) -> None:
        """Hands `ranks` (default all) every rank's record, and they build the mesh. `dial` maps a rank to
        another port that the others are told it listens on (a man in the middle's)."""
        self.released_at = time.monotonic()
        records = [json.loads(bytes.fromhex(r)) for r in self._records]
        for rank in range(len(self.procs)) if ranks is None else ranks:
            told = [dict(r, port=(dial or {}).get(peer, r["port"])) if peer != rank else r
                    for peer, r in enumerate(records)]
            stdin = self.procs[rank].stdin
            assert stdin is not None
            stdin.write(json.dumps([json.dumps(r).encode().hex() for r in told]) + "\n")
            stdin.flush()

    def wait_for_line(self, rank: int, line: str, timeout_s: float) -> None:
        """Waits until `rank` prints `line` (a live rank's "FORMED")."""
        self._next_line(rank, line, time.monotonic() + timeout_s)

    def tell(self, rank: int, line: str) -> None:
        """Writes one line to a rank's stdin (a live rank stops at it)."""
        stdin = self.procs[rank].stdin
        assert stdin is not None
        stdin.write(line + "\n")
        stdin.flush()

    def results(self, timeout_s: float) -> tuple[list[dict], float]:
        """Every rank's result, and the seconds from release() until the last rank reported it."""
        deadline = time.monotonic() + timeout_s
        results = [json.loads(self._next_line(rank, "RESULT ", deadline)) for rank in range(len(self.procs))]
        elapsed = time.monotonic() - self.released_at
        for rank, proc in enumerate(self.procs):
            code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            assert code == 0, f"rank {rank} exited with {code}:\n{self.output(rank)}"
        return results, elapsed

    def failure(self, rank: int, timeout_s: float) -> dict:
        """The error a rank reported when its mesh failed to form."""
        record = json.loads(self._next_line(rank, "ERROR ", time.monotonic() + timeout_s))
        self.procs[rank].wait(timeout=timeout_s)
        return record

    def output(self, rank: int) -> str:
        return "".join(self.stderr[rank])[-4000:]

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            if proc.stdin:
                try:
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
        for pump in self._pumps:
            pump.join(timeout=10)

    def __enter__(self) -> "MeshJob":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
