"""The runtime torn down and rebuilt 100 times in one process (half of them after a peer failure), with the
test as the elastic driver: no thread, fd or shared-memory segment may pile up."""

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

import pytest

from collective.bootstrap import RendezvousClient, RendezvousServer
from collective.config import default_host_key, env_for_elastic_worker, format_host_port
from collective.elastic.protocol import ROUND_COUNTER_KEY, Round, round_key
from elastic_job import SCRIPTS

RESETS = 100
WORKERS = ("hostA:0", "hostA:1")  # one host: the mesh uses shared memory


@pytest.mark.timeout(300)
def test_100_resets_leak_no_threads_fds_or_shm():
    secret = secrets.token_bytes(32)
    with RendezvousServer("127.0.0.1", 0, secret=secret) as server:
        rendezvous = format_host_port(*server.address)
        lines: queue.SimpleQueue = queue.SimpleQueue()
        procs = []
        try:
            for worker in WORKERS:
                env = {**os.environ, "PYTHONUNBUFFERED": "1",
                       **env_for_elastic_worker(worker, rendezvous, secret, f"{default_host_key()}/hostA", 60.0)}
                proc = subprocess.Popen([sys.executable, str(SCRIPTS / "reset_leak_worker.py"), "--resets",
                                         str(RESETS)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, start_new_session=True)
                procs.append(proc)
                threading.Thread(target=_pump, args=(worker, proc, lines), daemon=True).start()
            with RendezvousClient("127.0.0.1", server.address[1], 30.0, secret=secret) as client:
                held, output = _drive(client, lines, time.monotonic() + 240)
        finally:
            for proc in procs:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=30)
    for worker in WORKERS:
        record = held[worker]
        assert record["round"] == RESETS + 1, output
        assert record["baseline"]["shm_maps"] > 0, f"{worker}: the mesh did not use shared memory: {record}"
        assert record["final"] == record["baseline"], f"{worker} leaked across {RESETS - 5} resets: {record}"
    assert held["hostA:0"]["peer_failures"] == RESETS // 2


def _drive(client: RendezvousClient, lines: queue.SimpleQueue, deadline: float) -> tuple[dict, str]:
    """Publishes round 1, then the next round each time both workers have left the last one."""
    _publish(client, 1)
    left: dict[int, set[str]] = {}
    held: dict[str, dict] = {}
    output: list[str] = []
    while len(held) < len(WORKERS):
        remaining = deadline - time.monotonic()
        assert remaining > 0, "the workers did not finish in time:\n" + "\n".join(output[-50:])
        try:
            worker, line = lines.get(timeout=remaining)
        except queue.Empty:
            continue
        assert line is not None, f"{worker} exited early:\n" + "\n".join(output[-50:])
        output.append(f"[{worker}] {line}")
        if line.startswith("LEFT "):
            round_number = int(line.split()[1])
            left.setdefault(round_number, set()).add(worker)
            if len(left[round_number]) == len(WORKERS):
                _publish(client, round_number + 1)
        elif line.startswith("HELD "):
            held[worker] = json.loads(line[5:])
    return held, "\n".join(output)


def _publish(client: RendezvousClient, number: int) -> None:
    client.set(round_key(number), Round(number, WORKERS).encode())
    assert client.add(ROUND_COUNTER_KEY, 1) == number


def _pump(worker: str, proc: subprocess.Popen, lines: queue.SimpleQueue) -> None:
    for line in proc.stdout:
        lines.put((worker, line.rstrip("\n")))
    lines.put((worker, None))
