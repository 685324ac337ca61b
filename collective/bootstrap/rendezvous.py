"""A small TCP key-value store for bootstrapping, plus a Bootstrap built on it.

Wire protocol (all integers big-endian), chosen so the server never deserialises objects:

  handshake  client -> server  MAGIC(4) VERSION(1)
             server -> client  MAGIC(4) VERSION(1) AUTH_REQUIRED(1) NONCE(32)
             if AUTH_REQUIRED: client -> server HMAC-SHA256(secret, AUTH_CONTEXT + NONCE)(32)
                               server -> client ACCEPTED(1)
  request    OP(u8) KEY_LEN(u16) BODY_LEN(u32) KEY(utf-8) BODY
  response   STATUS(u8) BODY_LEN(u32) BODY

Bodies: SET = value; GET = wait in ms (u32, 0 = do not wait); ADD = delta (i64), answered with
the new total (i64); DELETE = empty, answered with one byte (1 if the key existed); DELETE_PREFIX =
empty, removes every key that starts with KEY, answered with how many there were (u32).
Counters are stored as ASCII decimal so GET on a counter key returns something readable.

The store may be reachable by other users of the host or network, so frames are size-limited,
malformed input closes only the offending connection, and a per-job secret can be required.
Connections are accepted and handshaken by the shared Listener (listener.py); a client retries a
refused, reset or dropped handshake until its own deadline.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import secrets
import socket
import struct
import threading
import time

from collective.bootstrap.base import Bootstrap, Closing, FixedMembership
from collective.bootstrap.listener import (
    ADMIT,
    DEFAULT_HANDSHAKE_TIMEOUT_S,
    DEFAULT_MAX_PENDING,
    Handshake,
    HandshakeRefused,
    Listener,
)

logger = logging.getLogger(__name__)

MAGIC = b"CLRV"
# 2: DELETE_PREFIX. A server answers a hello of another version with its own before it closes, so that
# a launcher and ranks of different releases fail at once, naming both versions.
PROTOCOL_VERSION = 2
AUTH_CONTEXT = b"collective-rendezvous-v1"
NONCE_BYTES = 32
MAX_KEY_BYTES = 1024
DEFAULT_MAX_VALUE_BYTES = 16 << 20
DEFAULT_MAX_STORE_BYTES = 512 << 20
MAX_WAIT_MS = 0xFFFFFFFF

OP_SET = 1
OP_GET = 2
OP_ADD = 3
OP_DELETE = 4
OP_DELETE_PREFIX = 5

STATUS_OK = 0
STATUS_TIMEOUT = 1
STATUS_ERROR = 2

_REQUEST_HEADER = struct.Struct("!BHI")
_RESPONSE_HEADER = struct.Struct("!BI")
_HELLO = struct.Struct("!4sB")
_SERVER_HELLO = struct.Struct(f"!4sBB{NONCE_BYTES}s")
_I64 = struct.Struct("!q")
_U32 = struct.Struct("!I")
_DIGEST_BYTES = hashlib.sha256().digest_size
_MAX_ERROR_BYTES = 4096
# Slack on client-side socket deadlines so a server answering "timeout" right at the
# deadline is not misread as a dead connection.
_IO_GRACE_S = 5.0


class RendezvousError(RuntimeError):
    """The server rejected a request (bad key, store full, counter on a non-integer value)."""


class ProtocolError(ConnectionError):
    """The peer sent bytes that do not follow the protocol; the connection is unusable."""


def _auth_digest(secret: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, AUTH_CONTEXT + nonce, hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    """Reads exactly n bytes (the socket's timeout bounds each recv)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError(f"peer closed the connection after {got} of {n} bytes")
        got += k
    return bytes(buf)


def _validate_key(key: str) -> bytes:
    if not isinstance(key, str):
        raise TypeError(f"rendezvous keys are str, got {type(key).__name__}")
    encoded = key.encode("utf-8")
    if not encoded or len(encoded) > MAX_KEY_BYTES:
        raise ValueError(f"rendezvous key must be 1..{MAX_KEY_BYTES} UTF-8 bytes: {key[:80]!r}")
    return encoded


class _KeyWaiters:
    """The requests blocked on one key: their condition (on the store's lock) and how many there are."""

    def __init__(self, lock: threading.Lock) -> None:
        self.condition = threading.Condition(lock)
        self.count = 0


class _Store:
    """The dictionary behind the server, with blocking lookups and a memory cap.

    Each waited-on key has a condition of its own (on one shared lock): a SET wakes only the requests
    waiting for its key. With one condition for the store, each of a 64-rank allgather's SETs woke all
    63 waiting requests, and their wake-ups were most of the server's time during formation."""

    def __init__(self, max_bytes: int) -> None:
        self._data: dict[str, bytes] = {}
        self._bytes = 0
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._waiting: dict[str, _KeyWaiters] = {}
        self._closed = False

    def set(self, key: str, value: bytes) -> None:
        with self._lock:
            self._put_locked(key, value)
            self._wake_locked(key)

    def get(self, key: str, wait_s: float) -> bytes | None:
        """The value, or None if it did not appear within wait_s or the store closed."""
        deadline = time.monotonic() + wait_s
        with self._lock:
            if key in self._data or self._closed:
                return self._data.get(key)
            waiters = self._waiting.get(key)
            if waiters is None:
                waiters = self._waiting[key] = _KeyWaiters(self._lock)
            waiters.count += 1
            try:
                while key not in self._data and not self._closed:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    waiters.condition.wait(remaining)
                return self._data.get(key)
            finally:
                waiters.count -= 1
                if not waiters.count:
                    del self._waiting[key]

    def add(self, key: str, delta: int) -> int:
        with self._lock:
            current = self._data.get(key, b"0")
            try:
                total = int(current.decode("ascii")) + delta
            except (UnicodeDecodeError, ValueError):
                raise RendezvousError(f"key {key!r} holds a non-counter value") from None
            if not -(1 << 63) <= total < (1 << 63):
                raise RendezvousError(f"counter {key!r} would overflow int64")
            self._put_locked(key, str(total).encode("ascii"))
            self._wake_locked(key)
            return total

    def delete(self, key: str) -> bool:
        with self._lock:
            return self._delete_locked(key)

    def delete_prefix(self, prefix: str) -> int:
        """Removes every key that starts with ``prefix``; returns how many there were."""
        with self._lock:
            doomed = [key for key in self._data if key.startswith(prefix)]
            for key in doomed:
                self._delete_locked(key)
            return len(doomed)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for waiters in self._waiting.values():
                waiters.condition.notify_all()

    def _wake_locked(self, key: str) -> None:
        waiters = self._waiting.get(key)
        if waiters is not None:
            waiters.condition.notify_all()

    def _delete_locked(self, key: str) -> bool:
        value = self._data.pop(key, None)
        if value is None:
            return False
        self._bytes -= len(key) + len(value)
        return True

    def _put_locked(self, key: str, value: bytes) -> None:
        old = self._data.get(key)
        new_bytes = self._bytes + len(key) + len(value)
        if old is not None:
            new_bytes -= len(key) + len(old)
        if new_bytes > self._max_bytes:
            raise RendezvousError(f"store is full ({self._max_bytes} bytes); refusing {key!r}")
        self._data[key] = value
        self._bytes = new_bytes


class RendezvousServer(Closing):
    """The TCP key-value store's server, on the shared Listener (see listener.py).

    A connection must finish the handshake within ``handshake_timeout_s``; strangers are capped
    at ``max_pending`` (the oldest dropped first) apart from the ``max_connections`` authenticated
    ones, which get a thread each and may stay idle until ``idle_timeout_s`` (None: until stop(),
    which wakes every blocked thread).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        secret: bytes | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        max_store_bytes: int = DEFAULT_MAX_STORE_BYTES,
        max_connections: int = 1024,
        max_pending: int = DEFAULT_MAX_PENDING,
        handshake_timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S,
        idle_timeout_s: float | None = None,
    ) -> None:
        if secret is not None and not secret:
            raise ValueError("secret must be non-empty when given")
        self._secret = secret
        self._max_value_bytes = max_value_bytes
        self._max_connections = max_connections
        self._idle_timeout_s = idle_timeout_s
        self._store = _Store(max_store_bytes)
        self._stopping = threading.Event()
        self._listener = Listener(
            host, port, self._handshake, self._serve_connection, name="rendezvous server",
            handshake_timeout_s=handshake_timeout_s, max_pending=max_pending,
            max_peers=max_connections)

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the server listens on; valid after start()."""
        return self._listener.address

    def start(self) -> None:
        self._listener.start()

    def fence(self) -> None:
        """Ends every wait, now and later: GETs answer as timed out at once, so that no job forms here any
        more (its launcher gave it up); the server answers until stop(), so a late rank fails at once rather
        than retrying to connect."""
        self._store.close()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Closes the listener and every connection; blocked GETs are answered with an error."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._store.close()
        self._listener.stop(timeout_s)

    def close(self) -> None:
        """``stop()``, for ``with``: the server serves inside the block and stops when it ends."""
        self.stop()

    def __enter__(self) -> "RendezvousServer":
        self.start()
        return self

    def _handshake(self, conn: socket.socket) -> Handshake:
        """The server's side of the handshake, driven by the Listener (fixed sizes only)."""
        magic, version = _HELLO.unpack((yield _HELLO.size))
        if magic != MAGIC:
            raise HandshakeRefused(f"bad hello {magic!r} v{version}")
        if version != PROTOCOL_VERSION:
            yield _SERVER_HELLO.pack(MAGIC, PROTOCOL_VERSION, 0, bytes(NONCE_BYTES))
            raise HandshakeRefused(f"a client of protocol v{version}; this server speaks v{PROTOCOL_VERSION}")
        if self._secret is None:
            # Full: close before the hello, so the client retries rather than fails.
            if not (yield ADMIT):
                raise HandshakeRefused(f"at the cap of {self._max_connections} connections")
            yield _SERVER_HELLO.pack(MAGIC, PROTOCOL_VERSION, 0, bytes(NONCE_BYTES))
            return None
        nonce = secrets.token_bytes(NONCE_BYTES)
        yield _SERVER_HELLO.pack(MAGIC, PROTOCOL_VERSION, 1, nonce)
        digest = yield _DIGEST_BYTES
        if not hmac.compare_digest(digest, _auth_digest(self._secret, nonce)):
            yield b"\x00"
            raise HandshakeRefused("client failed authentication")
        if not (yield ADMIT):
            raise HandshakeRefused(f"at the cap of {self._max_connections} connections")
        yield b"\x01"
        return None

    def _serve_connection(self, conn: socket.socket, _: object) -> None:
        """An authenticated connection's requests, in its own thread, until it closes or stop()."""
        try:
            conn.settimeout(self._idle_timeout_s)
            while not self._stopping.is_set():
                self._serve_request(conn)
        except (ConnectionError, TimeoutError, OSError) as e:
            # Includes ProtocolError: only this connection is affected.
            if not self._stopping.is_set():
                logger.debug("rendezvous connection closed: %s", e)

    def _serve_request(self, conn: socket.socket) -> None:
        op, key_len, body_len = _REQUEST_HEADER.unpack(_recv_exact(conn, _REQUEST_HEADER.size))
        # Validate lengths before reading, so a hostile header cannot make us allocate.
        if op not in (OP_SET, OP_GET, OP_ADD, OP_DELETE, OP_DELETE_PREFIX):
            self._reply_error_and_close(conn, f"unknown op {op}")
        if not 0 < key_len <= MAX_KEY_BYTES:
            self._reply_error_and_close(conn, f"key length {key_len} outside 1..{MAX_KEY_BYTES}")
        if body_len > self._max_value_bytes:
            self._reply_error_and_close(
                conn, f"body of {body_len} bytes exceeds {self._max_value_bytes}")
        expected_body = {OP_GET: _U32.size, OP_ADD: _I64.size, OP_DELETE: 0, OP_DELETE_PREFIX: 0}.get(op)
        if expected_body is not None and body_len != expected_body:
            self._reply_error_and_close(conn, f"op {op} needs a {expected_body}-byte body")
        try:
            key = _recv_exact(conn, key_len).decode("utf-8")
        except UnicodeDecodeError:
            self._reply_error_and_close(conn, "key is not UTF-8")
        body = _recv_exact(conn, body_len)
        try:
            status, reply = self._execute(op, key, body)
        except RendezvousError as e:
            status, reply = STATUS_ERROR, str(e).encode("utf-8")[:_MAX_ERROR_BYTES]
        conn.sendall(_RESPONSE_HEADER.pack(status, len(reply)) + reply)

    def _execute(self, op: int, key: str, body: bytes) -> tuple[int, bytes]:
        if op == OP_SET:
            self._store.set(key, body)
            return STATUS_OK, b""
        if op == OP_GET:
            (wait_ms,) = _U32.unpack(body)
            value = self._store.get(key, wait_ms / 1000.0)
            if value is not None:
                return STATUS_OK, value
            if self._stopping.is_set():
                raise RendezvousError("rendezvous server is stopping")
            return STATUS_TIMEOUT, b""
        if op == OP_ADD:
            (delta,) = _I64.unpack(body)
            return STATUS_OK, _I64.pack(self._store.add(key, delta))
        if op == OP_DELETE_PREFIX:
            return STATUS_OK, _U32.pack(self._store.delete_prefix(key))
        existed = self._store.delete(key)
        return STATUS_OK, bytes([int(existed)])

    def _reply_error_and_close(self, conn: socket.socket, why: str) -> None:
        message = why.encode("utf-8")[:_MAX_ERROR_BYTES]
        try:
            conn.sendall(_RESPONSE_HEADER.pack(STATUS_ERROR, len(message)) + message)
        except OSError:
            pass
        # The stream position is unknown now, so the connection cannot be reused.
        raise ProtocolError(why)


class RendezvousClient(Closing):
    """One connection to a RendezvousServer; requests from several threads are serialised.

    A blocking get() holds the connection, so threads that wait concurrently should each use
    their own client.
    """

    def __init__(
        self,
        host: str,
        port: int,
        timeout_s: float = 60.0,
        *,
        secret: bytes | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    ) -> None:
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        self._host = host
        self._port = port
        self.timeout_s = timeout_s
        self._max_value_bytes = max_value_bytes
        self._lock = threading.Lock()
        self._broken: str | None = None
        self._sock = self._connect(secret, time.monotonic() + timeout_s)

    def set(self, key: str, value: bytes) -> None:
        value = bytes(value)
        if len(value) > self._max_value_bytes:
            raise ValueError(
                f"value for {key!r} is {len(value)} bytes; the limit is {self._max_value_bytes}")
        self._request(OP_SET, key, value, self.timeout_s)

    def get(self, key: str, timeout_s: float | None = None) -> bytes:
        """Waits until ``key`` exists; raises TimeoutError naming the key otherwise."""
        wait_s = self.timeout_s if timeout_s is None else max(0.0, timeout_s)
        wait_ms = min(MAX_WAIT_MS, math.ceil(wait_s * 1000))
        status, body = self._request(OP_GET, key, _U32.pack(wait_ms), wait_s)
        if status == STATUS_TIMEOUT:
            raise TimeoutError(
                f"rendezvous key {key!r} did not appear within {wait_s:g}s "
                f"at {self._host}:{self._port}")
        return body

    def add(self, key: str, delta: int) -> int:
        """Atomically adds ``delta`` to the counter at ``key`` (missing = 0); returns the total."""
        _, body = self._request(OP_ADD, key, _I64.pack(delta), self.timeout_s)
        return _I64.unpack(body)[0]

    def delete(self, key: str) -> bool:
        """Removes ``key``; returns whether it existed."""
        _, body = self._request(OP_DELETE, key, b"", self.timeout_s)
        return body == b"\x01"

    def delete_prefix(self, prefix: str) -> int:
        """Removes every key that starts with ``prefix`` in one request; returns how many there were."""
        _, body = self._request(OP_DELETE_PREFIX, prefix, b"", self.timeout_s)
        return _U32.unpack(body)[0]

    def exists(self, key: str) -> bool:
        """Whether ``key`` is set right now (does not wait)."""
        try:
            self.get(key, 0)
            return True
        except TimeoutError:
            return False

    def wait(self, keys: list[str] | tuple[str, ...], timeout_s: float | None = None) -> None:
        """Waits until all ``keys`` exist; the TimeoutError lists every key still missing."""
        wait_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + wait_s
        for i, key in enumerate(keys):
            try:
                self.get(key, max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                missing = [k for k in keys[i:] if not self.exists(k)]
                shown = ", ".join(repr(k) for k in missing[:10])
                more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
                raise TimeoutError(
                    f"rendezvous keys still missing after {wait_s:g}s: {shown}{more}") from None

    def local_address(self) -> str:
        """The local IP of this connection: the interface that routes to the server."""
        return self._sock.getsockname()[0]

    def close(self) -> None:
        with self._lock:
            if self._broken is None:
                self._broken = "client closed"
            self._sock.close()

    def _connect(self, secret: bytes | None, deadline: float) -> socket.socket:
        """Retries until the deadline whatever keeps a handshake from finishing: the server may start
        late, or drop this connection among a flood of strangers. A server that answers and refuses
        (not a rendezvous server, a wrong secret) is final."""
        backoff_s = 0.05
        last_error: OSError | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"could not connect to rendezvous server {self._host}:{self._port} "
                    f"within {self.timeout_s:g}s: {last_error}")
            try:
                sock = socket.create_connection((self._host, self._port), timeout=remaining)
            except OSError as e:
                last_error = e
            else:
                try:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    sock.settimeout(max(0.001, deadline - time.monotonic()))
                    self._client_handshake(sock, secret)
                    return sock
                except (ProtocolError, PermissionError):
                    sock.close()
                    raise
                except OSError as e:  # reset, closed or timed out mid-handshake
                    sock.close()
                    last_error = e
                except BaseException:
                    sock.close()
                    raise
            # Backoff between attempts (rate limiting, not synchronisation).
            time.sleep(min(backoff_s, max(0.0, deadline - time.monotonic())))
            backoff_s = min(backoff_s * 2, 1.0)

    def _client_handshake(self, sock: socket.socket, secret: bytes | None) -> None:
        sock.sendall(_HELLO.pack(MAGIC, PROTOCOL_VERSION))
        magic, version, auth_required, nonce = _SERVER_HELLO.unpack(
            _recv_exact(sock, _SERVER_HELLO.size))
        if magic != MAGIC:
            raise ProtocolError(
                f"{self._host}:{self._port} is not a rendezvous server (v{PROTOCOL_VERSION})")
        if version != PROTOCOL_VERSION:
            raise ProtocolError(
                f"the rendezvous server at {self._host}:{self._port} speaks protocol v{version} and this "
                f"process v{PROTOCOL_VERSION}: the launcher (or Spark driver) and the ranks run different "
                f"releases of collective; install one release on both")
        if not auth_required:
            return
        if secret is None:
            raise PermissionError(
                f"rendezvous server {self._host}:{self._port} requires the job secret "
                "(set COLLECTIVE_SECRET)")
        sock.sendall(_auth_digest(secret, nonce))
        if _recv_exact(sock, 1) != b"\x01":
            raise PermissionError(
                f"rendezvous server {self._host}:{self._port} rejected the job secret")

    def _request(self, op: int, key: str, body: bytes, wait_s: float) -> tuple[int, bytes]:
        encoded_key = _validate_key(key)
        if not self._lock.acquire(timeout=wait_s + _IO_GRACE_S):
            raise TimeoutError(f"rendezvous client busy for {wait_s:g}s; request for {key!r}")
        try:
            if self._broken is not None:
                raise ConnectionError(f"rendezvous connection unusable: {self._broken}")
            try:
                self._sock.settimeout(wait_s + _IO_GRACE_S)
                self._sock.sendall(
                    _REQUEST_HEADER.pack(op, len(encoded_key), len(body)) + encoded_key + body)
                status, body_len = _RESPONSE_HEADER.unpack(
                    _recv_exact(self._sock, _RESPONSE_HEADER.size))
                if body_len > max(self._max_value_bytes, _MAX_ERROR_BYTES):
                    raise ProtocolError(f"response of {body_len} bytes exceeds the limit")
                reply = _recv_exact(self._sock, body_len)
            except (OSError, ConnectionError) as e:
                # A half-read response leaves the stream misaligned; never reuse it.
                self._broken = f"{type(e).__name__}: {e}"
                self._sock.close()
                if isinstance(e, socket.timeout):
                    raise TimeoutError(
                        f"rendezvous server {self._host}:{self._port} did not answer the "
                        f"request for {key!r} within {wait_s + _IO_GRACE_S:g}s") from e
                raise ConnectionError(
                    f"lost rendezvous server {self._host}:{self._port} during request for "
                    f"{key!r}: {e}") from e
        finally:
            self._lock.release()
        if status == STATUS_ERROR:
            raise RendezvousError(reply.decode("utf-8", "replace"))
        if status not in (STATUS_OK, STATUS_TIMEOUT):
            raise ProtocolError(f"unknown response status {status}")
        return status, reply


class RendezvousBootstrap(FixedMembership, Bootstrap):
    """Bootstrap over a RendezvousClient: each rank publishes a key, then reads everyone's."""

    def __init__(
        self,
        client: RendezvousClient,
        rank: int,
        size: int,
        scope: str = "collective",
        *,
        owns_client: bool = True,
    ) -> None:
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"rank={rank} must be in [0, size={size})")
        self._client = client
        self._rank = rank
        self._size = size
        self._scope = scope
        self._owns_client = owns_client
        self._seq = 0
        # Keys are namespaced by how many times this rank has bootstrapped in this scope, so a
        # job that re-initialises against the same server never reads a previous round's keys.
        self._generation = client.add(f"{scope}/generation/{rank}", 1)

    def allgather(self, payload: bytes, timeout_s: float) -> list[bytes]:
        """Every rank's payload, in rank order. Rank 0 reads each rank's key and publishes them all under
        one key, which every other rank reads: about 3p requests to the server, where each rank reading
        every key took p*p, and at 64 ranks that made the allgather most of the job's formation."""
        seq = self._seq
        self._seq += 1
        prefix = f"{self._scope}/{self._generation}/{seq}"
        deadline = time.monotonic() + timeout_s
        self._client.set(f"{prefix}/{self._rank}", payload)
        if self._rank == 0:
            gathered = [bytes(payload)]
            for peer in range(1, self._size):
                gathered.append(self._get_or_name_missing(prefix, f"{prefix}/{peer}", seq, deadline, timeout_s))
            if self._size > 1:
                self._client.set(f"{prefix}/all", _pack_payloads(gathered))
        else:
            gathered = _unpack_payloads(self._get_or_name_missing(prefix, f"{prefix}/all", seq, deadline, timeout_s),
                                        self._size)
        self._forget_round(prefix)
        return gathered

    def _get_or_name_missing(self, prefix: str, key: str, seq: int, deadline: float, timeout_s: float) -> bytes:
        try:
            return self._client.get(key, max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            missing = [r for r in range(self._size)
                       if r != self._rank and not self._client.exists(f"{prefix}/{r}")]
            raise TimeoutError(
                f"bootstrap allgather #{seq} (scope {self._scope!r}): rank(s) {missing or [0]} "
                f"did not contribute within {timeout_s:g}s") from None

    def local_address(self) -> str | None:
        return self._client.local_address()

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def _forget_round(self, prefix: str) -> None:
        # The last rank to finish reading removes the round, so long jobs do not grow the store.
        # One request: deleting the round's 2p + 1 keys one at a time held the last rank in init for
        # 2p + 1 round trips.
        if self._client.add(f"{prefix}/done", 1) == self._size:
            self._client.delete_prefix(f"{prefix}/")


def _pack_payloads(payloads: list[bytes]) -> bytes:
    return b"".join(_U32.pack(len(p)) + p for p in payloads)


def _unpack_payloads(packed: bytes, count: int) -> list[bytes]:
    payloads, at = [], 0
    for _ in range(count):
        (length,) = _U32.unpack_from(packed, at)
        payloads.append(packed[at + _U32.size:at + _U32.size + length])
        at += _U32.size + length
    if at != len(packed):
        raise RendezvousError(f"malformed gathered record: {len(packed) - at} bytes left over")
    return payloads
