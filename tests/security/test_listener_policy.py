"""The shared listener's rules, one stranger at a time: a stranger's bytes are read only as far as the handshake
asks, each stranger has its own deadline and never delays a peer, strangers are capped apart from peers (the oldest
dropped first), and clients retry a reset handshake until their own deadline."""

from __future__ import annotations

import queue
import secrets
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from collective.bootstrap import RendezvousClient, RendezvousServer
from collective.bootstrap.listener import ADMIT, Handshake, HandshakeRefused, Listener
from collective.launcher import LineSink
from spark_hvd.launch.task.output_channel import OutputSender
from spark_hvd.launch.driver.output_collector import OutputCollector

pytestmark = pytest.mark.timeout(60)

LISTENER_PY = Path(__file__).resolve().parents[2] / "collective" / "bootstrap" / "listener.py"
PASSWORD = b"PEER"


class _Server:
    """A Listener whose handshake is 'send PEER, get 1' and whose peers get an echo; it records what each
    handshake was given."""

    def __init__(self, **options: Any) -> None:
        self.received: "queue.SimpleQueue[bytes]" = queue.SimpleQueue()
        self.listener = Listener("127.0.0.1", 0, self._handshake, self._echo, name="test listener", **options)
        self.address = self.listener.start()

    def _handshake(self, conn: socket.socket) -> Handshake:
        data = yield len(PASSWORD)
        self.received.put(data)
        if data != PASSWORD:
            raise HandshakeRefused("wrong password")
        if not (yield ADMIT):
            raise HandshakeRefused("full")
        yield b"\x01"
        return "peer"

    @staticmethod
    def _echo(sock: socket.socket, identity: object) -> None:
        while data := sock.recv(4096):
            sock.sendall(data)

    def peer(self, sock: socket.socket | None = None) -> socket.socket:
        """Authenticates (on ``sock``, else a new connection) and checks that it is served."""
        sock = sock or socket.create_connection(self.address, timeout=10)
        sock.sendall(PASSWORD)
        assert sock.recv(1) == b"\x01"
        sock.sendall(b"ping")
        assert sock.recv(4) == b"ping"
        return sock


@pytest.fixture()
def server_factory() -> Iterator[Callable[..., _Server]]:
    servers: list[_Server] = []

    def make(**options: Any) -> _Server:
        servers.append(_Server(**options))
        return servers[-1]

    yield make
    for server in servers:
        server.listener.stop()


def _closed_by_server(sock: socket.socket, timeout_s: float = 10) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_stranger_is_read_only_as_far_as_the_handshake_asks(server_factory: Callable[..., _Server]) -> None:
    server = server_factory()
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(b"XXXX" + b"\xff" * 65536)
        assert _closed_by_server(sock)
    assert server.received.get(timeout=10) == b"XXXX"
    assert server.received.empty()


def test_each_stranger_has_its_own_deadline_and_never_delays_a_peer(server_factory: Callable[..., _Server]) -> None:
    server = server_factory(handshake_timeout_s=1.0)
    stalled = [socket.create_connection(server.address, timeout=10) for _ in range(20)]
    for sock in stalled:
        sock.sendall(PASSWORD[:2])  # half a handshake, then silence
    with server.peer():
        # Served while every stranger is still held: nothing waited for them.
        for sock in stalled:
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    for sock in stalled:
        sock.setblocking(True)
        assert _closed_by_server(sock)
        sock.close()


def test_strangers_are_capped_apart_from_peers_and_the_oldest_goes_first(
        server_factory: Callable[..., _Server]) -> None:
    server = server_factory(max_pending=3, max_peers=1)
    socks = [socket.create_connection(server.address, timeout=10) for _ in range(5)]
    try:
        assert _closed_by_server(socks[0]) and _closed_by_server(socks[1])
        server.peer(socks[2])  # a held stranger may still authenticate
        assert server.listener.peer_count() == 1
        for sock in socks[3:]:  # the one peer slot is taken: authenticated or not, no more peers
            sock.sendall(PASSWORD)
            assert _closed_by_server(sock)
    finally:
        for sock in socks:
            sock.close()


def test_the_rendezvous_cap_counts_only_authenticated_clients() -> None:
    secret = secrets.token_bytes(32)
    with RendezvousServer(secret=secret, max_connections=2, max_pending=8) as server:
        strangers = [socket.create_connection(server.address, timeout=10) for _ in range(50)]
        first = RendezvousClient(*server.address, 10, secret=secret)
        second = RendezvousClient(*server.address, 10, secret=secret)
        with pytest.raises(TimeoutError, match="could not connect"):
            RendezvousClient(*server.address, 1, secret=secret)  # full: it retries until its own deadline
        first.close()
        with RendezvousClient(*server.address, 10, secret=secret) as third:
            third.set("k", b"v")
        second.close()
        for sock in strangers:
            sock.close()


def _resetting_then_serving(start_real: Callable[[int], Any], resets: int) -> tuple[int, threading.Thread, list]:
    """A port whose first ``resets`` connections are reset mid-handshake, and then a real server on it."""
    front = socket.create_server(("127.0.0.1", 0))
    port = front.getsockname()[1]
    started: list = []

    def run() -> None:
        for _ in range(resets):
            conn, _ = front.accept()
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
            conn.close()
        front.close()
        started.append(start_real(port))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return port, thread, started


def test_the_rendezvous_client_retries_a_reset_handshake_until_its_deadline() -> None:
    secret = secrets.token_bytes(32)

    def start(port: int) -> RendezvousServer:
        server = RendezvousServer("127.0.0.1", port, secret=secret)
        server.start()
        return server

    port, thread, started = _resetting_then_serving(start, resets=3)
    try:
        with RendezvousClient("127.0.0.1", port, 20, secret=secret) as client:
            assert client.add("n", 1) == 1
    finally:
        thread.join(10)
        for server in started:
            server.stop()


def test_the_output_sender_retries_a_reset_handshake_until_its_deadline() -> None:
    secret = secrets.token_bytes(32)
    sink = LineSink(sys.stdout)

    def start(port: int) -> OutputCollector:
        collector = OutputCollector(secret, 1, lambda event: None, sink, sink, bind_host="127.0.0.1", port=port)
        collector.start()
        return collector

    port, thread, started = _resetting_then_serving(start, resets=3)
    try:
        OutputSender.connect(f"127.0.0.1:{port}", secret, 0, 20, on_driver_gone=lambda: None).close()
    finally:
        thread.join(10)
        for collector in started:
            collector.stop()


def test_the_listener_needs_only_the_standard_library() -> None:
    probe = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('listener', {str(LISTENER_PY)!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "def handshake(conn):\n    yield 1\n"
        "listener = module.Listener('127.0.0.1', 0, handshake, lambda s, i: None, name='probe')\n"
        "listener.start(); listener.stop()\n"
        "assert not any(m.startswith(('collective', 'pyspark', 'numpy')) for m in sys.modules)\n"
        "print('ok')\n")
    # -S: no site-packages at all, so neither the C++ extension nor pyspark could be found.
    done = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "ok", done.stderr
