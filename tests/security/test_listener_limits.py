"""The Python listeners at their limits, attacked as a stranger would: at the open-file limit (EMFILE) a flooded
server still serves a legitimate client and logs a line or two, not a torrent; stop() returns at once whatever
strangers hold."""

from __future__ import annotations

import io
import queue
import secrets
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from collective.bootstrap import RendezvousClient, RendezvousServer
from collective.launcher import LineSink
from hostile_peers import IdleFlood, raise_fd_limit
from spark_hvd.launch.task.output_channel import OutputSender
from spark_hvd.launch.driver.output_collector import OutputCollector, RankConnected
from watched_process import WatchedProcess

pytestmark = pytest.mark.timeout(120)

LIMITED_SERVER = str(Path(__file__).resolve().parent / "scripts" / "limited_server.py")
FLOOD = 300
FREE_FDS = 24          # far fewer than the flood, and than the listeners' stranger cap
CLIENT_DEADLINE_S = 20.0
MAX_LOG_LINES = 3


def _legitimate_client(kind: str, port: int, secret: bytes) -> None:
    if kind == "rendezvous":
        with RendezvousClient("127.0.0.1", port, CLIENT_DEADLINE_S, secret=secret) as client:
            client.set("served", b"yes")
            assert client.get("served", 5) == b"yes"
    else:
        sender = OutputSender.connect(f"127.0.0.1:{port}", secret, 0, CLIENT_DEADLINE_S, on_driver_gone=lambda: None)
        sender.close()


@pytest.mark.parametrize("kind", ["rendezvous", "collector"])
def test_at_the_open_file_limit_a_flooded_server_still_serves_and_logs_a_line(kind: str) -> None:
    secret = secrets.token_bytes(32)
    raise_fd_limit(FLOOD + 64)
    with WatchedProcess([sys.executable, LIMITED_SERVER, kind, secret.hex(), str(FREE_FDS)]) as server:
        port = int(server.expect("PORT", 60).split()[1])
        flood = IdleFlood(("127.0.0.1", port), FLOOD)
        try:
            assert flood.opened > FREE_FDS  # enough to exhaust its descriptors (a deaf server queues fewer)
            _legitimate_client(kind, port, secret)
            if kind == "collector":
                server.expect(f"EVENT {RankConnected(0)}", 10)
        finally:
            flood.close()
        server.close_stdin()
        server.expect("STOPPED", 30)
        assert server.wait(30) == 0
    logged = [line for line in server.lines if line.startswith("LOG")]
    assert any("file descriptors" in line for line in logged), server.lines[-20:]
    assert len(logged) <= MAX_LOG_LINES, logged[:10] + [f"... {len(logged)} lines in all"]


def _strangers(address: tuple[str, int], partial: bytes) -> list[socket.socket]:
    """200 silent connections and 50 that stop half-way through their hello."""
    socks = [socket.create_connection(address, timeout=5) for _ in range(250)]
    for sock in socks[200:]:
        sock.sendall(partial)
    return socks


@pytest.fixture()
def strangers_fd_room() -> Iterator[None]:
    raise_fd_limit(400)
    yield


def _rendezvous_with_peer(secret: bytes) -> tuple[Any, tuple[str, int], Callable[[], None]]:
    server = RendezvousServer("127.0.0.1", 0, secret=secret)
    server.start()
    client = RendezvousClient(*server.address, 10, secret=secret)
    client.set("k", b"v")
    return server, server.address, client.close


def _collector_with_peer(secret: bytes) -> tuple[Any, tuple[str, int], Callable[[], None]]:
    events: queue.SimpleQueue = queue.SimpleQueue()
    sink = LineSink(io.StringIO())
    server = OutputCollector(secret, 2, events.put, sink, sink, bind_host="127.0.0.1")
    port = server.start()
    gone = threading.Event()
    sender = OutputSender.connect(f"127.0.0.1:{port}", secret, 0, 10, on_driver_gone=gone.set)
    assert events.get(timeout=10) == RankConnected(0)

    def close() -> None:
        assert gone.wait(10), "the rank never learnt that the collector stopped"
        sender.close()

    return server, ("127.0.0.1", port), close


@pytest.mark.parametrize("start", [_rendezvous_with_peer, _collector_with_peer], ids=["rendezvous", "collector"])
def test_stop_returns_at_once_whatever_strangers_hold(start: Callable, strangers_fd_room: None) -> None:
    server, address, close_peer = start(secrets.token_bytes(32))
    socks = _strangers(address, partial=b"CL")
    try:
        began = time.monotonic()
        server.stop()
        stopped_s = time.monotonic() - began
        close_peer()
    finally:
        for sock in socks:
            sock.close()
    # The listeners promise a second; the bound is generous for a loaded machine.
    assert stopped_s < 2.0, f"stop() took {stopped_s:.2f}s with {len(socks)} strangers attached"
