"""Runs one collective job with its ranks placed on emulated hosts (test process side).

The rendezvous is served from the first rank's host, at that host's address; every rank gets the
launcher's environment (collective.config.env_for_rank) and runs inside its host.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from jobs import parse_results  # noqa: E402

from collective.config import env_for_rank, format_host_port  # noqa: E402
from emulated_hosts import EmulatedHosts  # noqa: E402

WORKERS = Path(__file__).resolve().parent / "workers"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class HostJob:
    returncodes: list[int]
    output: str  # every rank's output, each line prefixed with "[rank]: "

    @property
    def records(self) -> dict[int, list[dict]]:
        return parse_results(self.output)

    def record(self, rank: int) -> dict:
        found = self.records.get(rank, [])
        assert len(found) == 1, f"rank {rank} reported {found}; output:\n{self.output}"
        return found[0]


def rank_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLLECTIVE_", "HOROVOD_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def serve_rendezvous(hosts: EmulatedHosts, index: int, secret: bytes) -> tuple[subprocess.Popen, str]:
    """Starts a rendezvous server on host ``index``, at its address; returns the process and "address:port"."""
    server = hosts.popen(index, [sys.executable, str(WORKERS / "rendezvous_host.py"), hosts[index].address,
                                 secret.hex()], env=rank_environment(), stdin=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    line = server.stdout.readline().decode()
    if not line.startswith("port "):
        raise RuntimeError(f"rendezvous on host {index} did not start: {line!r} {server.stderr.read()!r}")
    return server, format_host_port(hosts[index].address, int(line.split()[1]))


def run_on_hosts(hosts: EmulatedHosts, placement: Sequence[int], worker: str, *args: str,
                 env: Mapping[str, str] | None = None, per_rank_env: Sequence[Mapping[str, str]] | None = None,
                 timeout_s: float = 60.0) -> HostJob:
    """Rank r runs ``workers/<worker>`` (or an absolute path) on host ``placement[r]``, bootstrapped by a
    rendezvous on rank 0's host; everything is killed by ``timeout_s``."""
    secret = secrets.token_bytes(16)
    server, rendezvous = serve_rendezvous(hosts, placement[0], secret)

    def rank_env(rank: int) -> dict[str, str]:
        child_env = rank_environment(env)
        child_env.update(env_for_rank(rank, len(placement), rendezvous, secret))
        child_env.update((per_rank_env or [{}] * len(placement))[rank])
        return child_env

    try:
        return run_ranks(hosts, placement, lambda rank: [sys.executable, str(WORKERS / worker), *args], rank_env,
                         timeout_s)
    finally:
        server.kill()
        server.wait()


def run_ranks(hosts: EmulatedHosts, placement: Sequence[int], argv: Callable[[int], list[str]],
              env: Callable[[int], dict[str, str]], timeout_s: float) -> HostJob:
    """Starts ``argv(rank)`` with ``env(rank)`` on host ``placement[rank]`` for every rank, and waits for all
    of them (any still running after ``timeout_s`` is killed and counts as -9)."""
    ranks = [hosts.popen(host, argv(rank), env=env(rank)) for rank, host in enumerate(placement)]
    outputs: list[list[str]] = [[] for _ in ranks]

    def pump(rank: int) -> None:
        for raw in ranks[rank].stdout:
            outputs[rank].append(f"[{rank}]: {raw.decode(errors='replace')}")

    pumps = [threading.Thread(target=pump, args=(r,), daemon=True) for r in range(len(ranks))]
    for thread in pumps:
        thread.start()
    deadline = time.monotonic() + timeout_s
    codes = []
    try:
        for proc in ranks:
            try:
                codes.append(proc.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(-9)
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        for thread in pumps:
            thread.join(timeout=5)
    return HostJob(codes, "".join(line for out in outputs for line in out))
