"""Any process: the accept loop every Python server shares (rank 0's rendezvous store, the driver's output collector).

An unauthenticated connection costs the server nothing it cannot take back at once:
- strangers are handshaken concurrently on one selector thread, never a thread each, and each has a deadline
  of its own (``handshake_timeout_s``), so no stranger delays another connection or an authenticated peer;
- at most ``max_pending`` strangers are held; a new one beyond that drops the oldest;
- authenticated peers are capped apart (``max_peers``), and only they get a thread, running the server's ``serve``;
- at the open-file limit (EMFILE/ENFILE) the oldest stranger is dropped to make room, and with none left to drop,
  accepting pauses for a bounded back-off; one rate-limited log line says so (no busy spin);
- ``stop()`` closes every stranger at once, so it returns within a second whatever they hold.

A handshake is a generator the server writes, driven here without ever blocking. It yields:
- ``bytes``: send them; it is resumed once they are all sent;
- an ``int`` n: receive exactly n bytes; it is resumed with them (nothing beyond them is ever read);
- ``ADMIT``: ask for a slot among the authenticated peers; it is resumed with True (reserved) or False.
It returns the peer's identity, handed to ``serve``, or raises HandshakeRefused. When a connection is
abandoned mid-handshake (deadline, dropped, stopped) the generator is closed, so a ``try/finally`` around a
yield can undo what it reserved.

This module needs only the standard library (no C++ extension, no pyspark).
"""

from __future__ import annotations

import collections
import errno
import logging
import selectors
import socket
import threading
import time
from typing import Any, Callable, Generator

logger = logging.getLogger(__name__)

DEFAULT_HANDSHAKE_TIMEOUT_S = 2.0
DEFAULT_MAX_PENDING = 256
DEFAULT_STOP_TIMEOUT_S = 1.0

# Accepts per wake-up: pending handshakes are served between batches, so a flood of new connections cannot
# starve the ones already accepted.
_ACCEPT_BATCH = 64
_BACKOFF_MIN_S = 0.05
_BACKOFF_MAX_S = 1.0
_LOG_INTERVAL_S = 60.0
_OUT_OF_FDS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# accept() also reports errors that belong to the connection it was taking, not to the listener (see accept(2)).
_CONNECTION_GONE = frozenset({
    errno.ECONNABORTED, errno.EPROTO, errno.ENOPROTOOPT, errno.EHOSTDOWN, errno.ENONET,
    errno.EHOSTUNREACH, errno.EOPNOTSUPP, errno.ENETUNREACH, errno.ENETDOWN, errno.EPERM,
})


class HandshakeRefused(Exception):
    """Raised by a handshake: the peer is not one of ours (or there is no room); only its connection closes."""


class _Admit:
    def __repr__(self) -> str:
        return "ADMIT"


ADMIT: Any = _Admit()

Handshake = Generator[Any, Any, Any]


class _Pending:
    """One stranger's connection while its handshake runs."""

    __slots__ = ("sock", "steps", "deadline", "outgoing", "wanted", "received", "events", "reserved")

    def __init__(self, sock: socket.socket, steps: Handshake, deadline: float) -> None:
        self.sock = sock
        self.steps = steps
        self.deadline = deadline
        self.outgoing = memoryview(b"")
        self.wanted = 0
        self.received = bytearray()
        self.events = 0          # what the selector watches for (0: not registered)
        self.reserved = False    # holds one of the authenticated peers' slots


class _ThrottledLog:
    """At most one warning per interval; the next one says how many were held back."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._next_at = 0.0
        self._held_back = 0

    def warning(self, message: str) -> None:
        now = time.monotonic()
        if now < self._next_at:
            self._held_back += 1
            return
        if self._held_back:
            message += f" ({self._held_back} more times since the last report)"
        logger.warning(message)
        self._next_at = now + self._interval_s
        self._held_back = 0


class Listener:
    """A TCP listener that handshakes strangers concurrently and serves each authenticated peer in a thread."""

    def __init__(
        self,
        host: str,
        port: int,
        handshake: Callable[[socket.socket], Handshake],
        serve: Callable[[socket.socket, Any], None],
        *,
        name: str,
        handshake_timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S,
        max_pending: int = DEFAULT_MAX_PENDING,
        max_peers: int = 1024,
    ) -> None:
        """``handshake(sock)`` makes the generator for one new connection; ``serve(sock, identity)`` runs in the
        peer's thread once it authenticated (the socket is blocking then, and closed here when serve returns)."""
        if not handshake_timeout_s > 0:
            raise ValueError(f"handshake_timeout_s must be positive, got {handshake_timeout_s!r}")
        if max_pending < 1 or max_peers < 1:
            raise ValueError(f"max_pending and max_peers must be >= 1, got {max_pending} and {max_peers}")
        self._host = host
        self._port = port
        self._handshake = handshake
        self._serve = serve
        self._name = name
        self._handshake_timeout_s = handshake_timeout_s
        self._max_pending = max_pending
        self._max_peers = max_peers
        self._sock: socket.socket | None = None
        self._address: tuple[str, int] | None = None
        self._selector: selectors.BaseSelector | None = None
        self._wake_reader: socket.socket | None = None
        self._wake_writer: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # Touched by the loop thread only.
        self._pending: collections.OrderedDict[_Pending, None] = collections.OrderedDict()
        self._accepting = False
        self._resume_at = 0.0
        self._backoff_s = 0.0
        self._log = _ThrottledLog(_LOG_INTERVAL_S)
        # Shared with peer threads and stop().
        self._lock = threading.Lock()
        self._peers: dict[socket.socket, threading.Thread] = {}
        self._reserved = 0

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) as bound; valid after start()."""
        if self._address is None:
            raise RuntimeError(f"{self._name}: the address is only known after start()")
        return self._address

    def start(self) -> tuple[str, int]:
        """Binds, listens and starts the loop thread; returns the bound (host, port)."""
        if self._sock is not None:
            raise RuntimeError(f"{self._name} already started")
        # Peers dial IPv4 unless given an IPv6 literal; a host name binds what it resolves to here.
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((self._host, self._port))
            except OSError as e:
                raise OSError(e.errno, f"{self._name} cannot listen on {self._host}:{self._port}: "
                                       f"{e.strerror}") from e
            # The kernel's queue, not ours: a burst of connections waits there instead of being refused.
            sock.listen(socket.SOMAXCONN)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._address = tuple(sock.getsockname()[:2])  # type: ignore[assignment]
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_reader, selectors.EVENT_READ, None)
        self._watch_listener(True)
        self._thread = threading.Thread(target=self._run, name=f"{self._name}-listener", daemon=True)
        self._thread.start()
        return self.address

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """Closes the listener and every stranger at once, shuts every peer's socket down (its serve() then
        returns) and waits up to ``timeout_s`` in all for the threads."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        deadline = time.monotonic() + timeout_s
        if self._thread is None:
            return
        try:
            assert self._wake_writer is not None
            self._wake_writer.send(b"x")
        except OSError:
            pass
        self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            peers = dict(self._peers)
            # Under the lock: a peer thread closes its socket under it too, so this never hits a reused fd.
            for sock in peers:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        for thread in peers.values():
            thread.join(max(0.0, deadline - time.monotonic()))

    def peer_count(self) -> int:
        """Authenticated peers connected now."""
        with self._lock:
            return len(self._peers)

    # The loop thread.

    def _run(self) -> None:
        assert self._selector is not None
        try:
            while not self._stopping.is_set():
                ready = self._selector.select(self._next_timeout())
                accept_now = False
                for key, _ in ready:
                    if key.data is self:
                        accept_now = True
                    elif isinstance(key.data, _Pending):
                        self._guarded(self._on_ready, key.data)
                if self._stopping.is_set():
                    break
                now = time.monotonic()
                self._expire(now)
                if not self._accepting and now >= self._resume_at:
                    self._watch_listener(True)
                    accept_now = True
                if accept_now:
                    self._accept_batch()
        except Exception:  # noqa: BLE001 - a bug here must be seen, and must not leak the sockets
            logger.exception("%s: the accept loop failed", self._name)
        finally:
            self._close_all()

    def _next_timeout(self) -> float | None:
        wake_at = []
        if self._pending:
            wake_at.append(next(iter(self._pending)).deadline)  # the oldest has the earliest deadline
        if not self._accepting:
            wake_at.append(self._resume_at)
        return max(0.0, min(wake_at) - time.monotonic()) if wake_at else None

    def _accept_batch(self) -> None:
        assert self._sock is not None
        for _ in range(_ACCEPT_BATCH):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in _CONNECTION_GONE:
                    continue
                self._accept_failed(e)
                return
            self._backoff_s = 0.0
            self._begin(conn)

    def _accept_failed(self, error: OSError) -> None:
        if error.errno in _OUT_OF_FDS and self._pending:
            # A stranger's descriptor is the one we can take back; the next accept gets it at once.
            self._log.warning(f"{self._name} on {self._describe()}: out of file descriptors ({error}); "
                              "dropping the oldest unauthenticated connections to make room")
            self._drop(next(iter(self._pending)))
            return
        self._backoff_s = min(_BACKOFF_MAX_S, max(_BACKOFF_MIN_S, self._backoff_s * 2))
        self._log.warning(f"{self._name} on {self._describe()}: accept failed ({error}); "
                          f"pausing new connections for up to {_BACKOFF_MAX_S:g}s at a time")
        self._watch_listener(False)
        self._resume_at = time.monotonic() + self._backoff_s

    def _begin(self, conn: socket.socket) -> None:
        if len(self._pending) >= self._max_pending:
            self._drop(next(iter(self._pending)))
        try:
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # handshakes are small messages
        except OSError:
            conn.close()
            return
        try:
            steps = self._handshake(conn)
        except Exception:  # noqa: BLE001 - a server bug refuses this connection only
            logger.exception("%s: starting a handshake failed", self._name)
            conn.close()
            return
        pending = _Pending(conn, steps, time.monotonic() + self._handshake_timeout_s)
        self._pending[pending] = None
        self._guarded(self._advance, pending, None)

    def _guarded(self, step: Callable[..., None], pending: _Pending, *args: Any) -> None:
        try:
            step(pending, *args)
        except Exception:  # noqa: BLE001 - a bug in one handshake closes that connection only
            logger.exception("%s: a handshake failed", self._name)
            self._drop(pending)

    def _advance(self, pending: _Pending, value: Any) -> None:
        """Runs the handshake until it waits on the network, finishes or refuses."""
        while True:
            try:
                step = pending.steps.send(value)
            except StopIteration as done:
                self._promote(pending, done.value)
                return
            except HandshakeRefused as why:
                logger.debug("%s: refused a connection: %s", self._name, why)
                self._drop(pending)
                return
            if step is ADMIT:
                value = self._reserve(pending)
            elif isinstance(step, bytes):
                pending.outgoing = memoryview(step)
                if not self._flush(pending):
                    return
                value = None
            elif isinstance(step, int) and step > 0:
                pending.wanted = step
                pending.received = bytearray()
                self._watch(pending, selectors.EVENT_READ)
                return
            else:
                raise TypeError(f"a handshake yielded {step!r}: bytes, a positive int or ADMIT")

    def _on_ready(self, pending: _Pending) -> None:
        if pending not in self._pending:
            return  # dropped earlier in this round
        if pending.outgoing:
            if self._flush(pending):
                self._advance(pending, None)
            return
        try:
            chunk = pending.sock.recv(pending.wanted - len(pending.received))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(pending)
            return
        if not chunk:
            self._drop(pending)
            return
        pending.received += chunk
        if len(pending.received) == pending.wanted:
            self._advance(pending, bytes(pending.received))

    def _flush(self, pending: _Pending) -> bool:
        """Sends what the handshake yielded; False while some is left (it waits to be writable) or on error."""
        try:
            while pending.outgoing:
                sent = pending.sock.send(pending.outgoing)
                pending.outgoing = pending.outgoing[sent:]
        except (BlockingIOError, InterruptedError):
            self._watch(pending, selectors.EVENT_WRITE)
            return False
        except OSError:
            self._drop(pending)
            return False
        return True

    def _reserve(self, pending: _Pending) -> bool:
        if pending.reserved:
            return True
        with self._lock:
            if self._stopping.is_set() or len(self._peers) + self._reserved >= self._max_peers:
                return False
            self._reserved += 1
        pending.reserved = True
        return True

    def _release(self, pending: _Pending) -> None:
        if pending.reserved:
            pending.reserved = False
            with self._lock:
                self._reserved -= 1

    def _promote(self, pending: _Pending, identity: Any) -> None:
        self._forget(pending)
        sock = pending.sock
        with self._lock:
            had_slot = pending.reserved
            if had_slot:
                pending.reserved = False
                self._reserved -= 1
            room = had_slot or len(self._peers) + self._reserved < self._max_peers
            admitted = room and not self._stopping.is_set()
            if admitted:
                thread = threading.Thread(target=self._serve_peer, args=(sock, identity),
                                          name=f"{self._name}-peer", daemon=True)
                self._peers[sock] = thread
        if not admitted:
            sock.close()
            return
        sock.setblocking(True)
        thread.start()

    def _serve_peer(self, sock: socket.socket, identity: Any) -> None:
        try:
            self._serve(sock, identity)
        except Exception:  # noqa: BLE001 - one peer's failure must not take the server down
            logger.exception("%s: serving a peer failed", self._name)
        finally:
            with self._lock:
                self._peers.pop(sock, None)
                sock.close()

    def _expire(self, now: float) -> None:
        while self._pending:
            oldest = next(iter(self._pending))
            if oldest.deadline > now:
                return
            logger.debug("%s: a connection did not finish its handshake within %gs", self._name,
                         self._handshake_timeout_s)
            self._drop(oldest)

    def _watch(self, pending: _Pending, events: int) -> None:
        assert self._selector is not None
        if pending.events == events:
            return
        if pending.events:
            self._selector.modify(pending.sock, events, pending)
        else:
            self._selector.register(pending.sock, events, pending)
        pending.events = events

    def _forget(self, pending: _Pending) -> None:
        """Takes the connection off the pending list and the selector (not closing it)."""
        assert self._selector is not None
        self._pending.pop(pending, None)
        if pending.events:
            self._selector.unregister(pending.sock)
            pending.events = 0

    def _drop(self, pending: _Pending) -> None:
        self._forget(pending)
        self._release(pending)
        try:
            pending.steps.close()  # lets a handshake undo what it reserved
        except Exception:  # noqa: BLE001
            logger.exception("%s: closing a handshake failed", self._name)
        pending.sock.close()

    def _watch_listener(self, on: bool) -> None:
        assert self._selector is not None and self._sock is not None
        if on and not self._accepting:
            self._selector.register(self._sock, selectors.EVENT_READ, self)
        elif not on and self._accepting:
            self._selector.unregister(self._sock)
        self._accepting = on

    def _close_all(self) -> None:
        for pending in list(self._pending):
            self._drop(pending)
        if self._selector is not None:
            self._selector.close()
        for sock in (self._sock, self._wake_reader, self._wake_writer):
            if sock is not None:
                sock.close()

    def _describe(self) -> str:
        host, port = self._address or (self._host, self._port)
        return f"{host}:{port}"
