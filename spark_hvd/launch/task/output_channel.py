"""Task: the task-to-driver output connection, its sending end and its handshake (both ends).

It carries each rank's output lines and events and, at the end, a failure report; nothing flows back except
the connection closing, which tells the task that the driver has given up on the job.

Handshake (integers big-endian):
    driver -> task   MAGIC(4) VERSION(1) NONCE(32)
    task -> driver   RANK(u32) HMAC-SHA256(secret, CONTEXT + NONCE + RANK)(32)
    driver -> task   ACCEPTED(1)
then task -> driver frames (see framing.py) with header["kind"] in KINDS.
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import struct
import threading
import time
from typing import Any, Callable

from collective.config import parse_host_port
from spark_hvd.errors import RankFailure
from spark_hvd.launch.framing import write_frame

MAGIC = b"SHVO"
VERSION = 1
NONCE_BYTES = 32
DIGEST_BYTES = hashlib.sha256().digest_size
_CONTEXT = b"spark-hvd-output-v1"
_SERVER_HELLO = struct.Struct(f"!4sB{NONCE_BYTES}s")
_RANK = struct.Struct("!I")

KIND_LINE = "line"          # {"stream": "stdout"|"stderr", "text": str}
KIND_NOTICE = "notice"      # {"text": str}: something the task itself wants the driver to show
KIND_FAILURE = "failure"    # the RankFailure fields
KIND_EVENT = "event"        # {"data": {...}}: spark_hvd.emit_event from fn
KIND_COMMIT = "commit"      # {"seq": n} + blob: rank 0's pickled commit (spark_hvd.run_elastic)
KINDS = frozenset({KIND_LINE, KIND_NOTICE, KIND_FAILURE, KIND_EVENT, KIND_COMMIT})


def auth_digest(secret: bytes, nonce: bytes, rank: int) -> bytes:
    return hmac.new(secret, _CONTEXT + nonce + _RANK.pack(rank), hashlib.sha256).digest()


def server_hello(nonce: bytes) -> bytes:
    return _SERVER_HELLO.pack(MAGIC, VERSION, nonce)


def parse_client_hello(data: bytes) -> tuple[int, bytes]:
    """(rank, digest) from the task's reply to the hello."""
    (rank,) = _RANK.unpack(data[:_RANK.size])
    return rank, data[_RANK.size:]


CLIENT_HELLO_BYTES = _RANK.size + DIGEST_BYTES
SERVER_HELLO_BYTES = _SERVER_HELLO.size


class OutputSender:
    """The task's connection to the driver's OutputCollector; safe to use from several threads.

    If the driver goes away, sends are silently dropped (the child's output must keep draining),
    and ``on_driver_gone`` runs once, so the task can stop its rank.
    """

    driver_listening = True    # the driver ends the job (and closes this) once it has heard a failure

    def __init__(self, sock: socket.socket, on_driver_gone: Callable[[], None]) -> None:
        self._sock = sock
        self._stream = sock.makefile("wb")
        self._lock = threading.Lock()
        self._broken = False
        self._closing = threading.Event()
        self._on_driver_gone = on_driver_gone
        self._watcher = threading.Thread(target=self._watch, name="spark-hvd-driver-watch", daemon=True)
        self._watcher.start()

    @classmethod
    def connect(
        cls,
        address: str,
        secret: bytes,
        rank: int,
        timeout_s: float,
        on_driver_gone: Callable[[], None],
    ) -> "OutputSender":
        """Connects and authenticates as ``rank``, retrying a refused, reset or dropped connection until
        ``timeout_s`` has passed (the collector drops strangers first when flooded, and a rank may be
        caught among them). A collector that answers and refuses, or is something else, is final."""
        host, port = parse_host_port(address)
        deadline = time.monotonic() + timeout_s
        backoff_s = 0.05
        while True:
            remaining = deadline - time.monotonic()
            try:
                sock = socket.create_connection((host, port), timeout=max(0.001, remaining))
                try:
                    _client_handshake(sock, address, secret, rank)
                except BaseException:
                    sock.close()
                    raise
                return cls(sock, on_driver_gone)
            except _Refused:
                raise
            except OSError as e:
                if deadline - time.monotonic() <= 0:
                    raise ConnectionError(
                        f"rank {rank} cannot reach the spark_hvd output collector on the driver at "
                        f"{address} within {timeout_s:g}s: {e}") from e
            # Backoff between attempts (rate limiting, not synchronisation).
            time.sleep(min(backoff_s, max(0.0, deadline - time.monotonic())))
            backoff_s = min(backoff_s * 2, 1.0)

    def send_line(self, stream: str, text: str) -> None:
        self._send({"kind": KIND_LINE, "stream": stream, "text": text})

    def send_notice(self, text: str) -> None:
        self._send({"kind": KIND_NOTICE, "text": text})

    def send_event(self, data: dict[str, Any]) -> None:
        self._send({"kind": KIND_EVENT, "data": data})

    def send_failure(self, failure: RankFailure) -> None:
        self._send({"kind": KIND_FAILURE, **failure.to_wire()})

    def send_commit(self, seq: int, blob: bytes) -> None:
        self._send({"kind": KIND_COMMIT, "seq": seq}, blob)

    def close(self) -> None:
        """Flushes and closes; the driver reads everything sent before it sees the end."""
        self._closing.set()
        with self._lock:
            try:
                self._stream.close()
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
            self._broken = True
        # Once close() returns, on_driver_gone can no longer fire for this sender.
        if threading.current_thread() is not self._watcher:
            self._watcher.join(5.0)

    def _send(self, header: dict[str, Any], blob: bytes = b"") -> None:
        with self._lock:
            if self._broken:
                return
            try:
                write_frame(self._stream, header, blob)
            except (OSError, ValueError):
                self._broken = True

    def _watch(self) -> None:
        # The driver never sends after the handshake, so any return from recv means it has closed.
        try:
            self._sock.recv(1)
        except OSError:
            pass
        if not self._closing.is_set():
            with self._lock:
                self._broken = True
            self._on_driver_gone()


class _Refused(ConnectionError):
    """The collector answered and said no (or is not one): retrying cannot help."""


def _client_handshake(sock: socket.socket, address: str, secret: bytes, rank: int) -> None:
    """The task's side; the socket's timeout bounds each step."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    magic, version, nonce = _SERVER_HELLO.unpack(recv_exactly(sock, SERVER_HELLO_BYTES))
    if magic != MAGIC or version != VERSION:
        raise _Refused(f"{address} is not a spark_hvd output collector (v{VERSION})")
    sock.sendall(_RANK.pack(rank) + auth_digest(secret, nonce, rank))
    if recv_exactly(sock, 1) != b"\x01":
        raise _Refused(f"the output collector at {address} rejected rank {rank}")
    # From here on only the watcher reads, and it must block until the driver closes.
    sock.settimeout(None)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} handshake bytes")
        buf += chunk
    return buf
