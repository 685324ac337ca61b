"""Hostile connections, made as a stranger on the same network would make them: held open and silent, full
of noise, flooding, or answering a listener's challenge with forged and replayed handshakes. One thread
drives them all and records what each listener sent back before it hung up."""

from __future__ import annotations

import errno
import os
import resource
import selectors
import socket
import threading
from dataclasses import dataclass, field
from typing import Callable

# What a mesh listener sends first (its greeting and a nonce), and the size of a rank's answer to it: both
# can be read off the wire by anyone, with no secret.
CHALLENGE_BYTES = 40
ANSWER_BYTES = 80
_KEPT_BYTES = 4096  # of what the listener sent each stranger


@dataclass
class Stranger:
    sock: socket.socket
    answer: Callable[[bytes], bytes] | None = None  # the reply to the listener's challenge
    to_send: bytearray = field(default_factory=bytearray)
    stream_left: int = 0        # noise still to push, as fast as the listener's buffers take it
    connected: bool = False
    received: bytearray = field(default_factory=bytearray)
    hung_up: bool = False        # the listener closed or reset this connection
    failed: str | None = None    # the connection never opened


def raise_fd_limit(needed: int) -> int:
    """Raises this process's soft RLIMIT_NOFILE towards `needed` (never past the hard limit); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


class Strangers:
    """A set of hostile connections, opened at once (into the listener's backlog) and held until close()."""

    def __init__(self) -> None:
        self.all: list[Stranger] = []
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._stop = False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def open(self, address: tuple[str, int], count: int, *, send: bytes = b"", stream_bytes: int = 0,
             answer: Callable[[bytes], bytes] | None = None) -> list[Stranger]:
        """Opens `count` connections to `address`: each sends `send`, then `stream_bytes` of noise, and
        answers the challenge with `answer(challenge)` when one is given."""
        opened = []
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            stranger = Stranger(sock, answer, bytearray(send), stream_bytes)
            code = sock.connect_ex(address)
            if code not in (0, errno.EINPROGRESS):
                stranger.failed = os.strerror(code)
                sock.close()
            opened.append(stranger)
        with self._lock:
            for stranger in opened:
                if stranger.failed is None:
                    self._selector.register(stranger.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, stranger)
            self.all += opened
        self._wake_w.send(b"x")
        return opened

    def wait_connected(self, strangers: list[Stranger], timeout_s: float, at_least: int | None = None) -> None:
        """Waits until the kernel has completed `at_least` (default all) of these connections: they wait in
        the listener's queue, ahead of any rank's."""
        want = len(strangers) if at_least is None else at_least
        with self._changed:
            if not self._changed.wait_for(lambda: sum(s.connected or s.failed is not None for s in strangers) >= want,
                                          timeout_s):
                opened = sum(1 for s in strangers if s.connected)
                raise AssertionError(f"only {opened} of {len(strangers)} hostile connections opened")
        failed = [s.failed for s in strangers if s.failed]
        assert not failed, f"{len(failed)} hostile connections could not open: {failed[:3]}"

    def wait_settled(self, strangers: list[Stranger], timeout_s: float) -> None:
        """Waits until every one of these connections is hung up by the listener or failed, or `timeout_s`
        passes: this thread sees a listener's hang-ups some time after the listener makes them."""
        with self._changed:
            self._changed.wait_for(lambda: all(s.hung_up or s.failed is not None for s in strangers), timeout_s)

    def _events(self, s: Stranger) -> int:
        writing = not s.connected or s.to_send or s.stream_left > 0
        return selectors.EVENT_READ | (selectors.EVENT_WRITE if writing else 0)

    def _on_writable(self, s: Stranger) -> None:
        if not s.connected:
            code = s.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code != 0:
                s.failed = os.strerror(code)
                return
            s.connected = True
        if not s.to_send and s.stream_left > 0:
            chunk = min(s.stream_left, 64 << 10)
            s.to_send += os.urandom(chunk)
            s.stream_left -= chunk
        if s.to_send:
            sent = s.sock.send(s.to_send)
            del s.to_send[:sent]

    def _on_readable(self, s: Stranger) -> None:
        data = s.sock.recv(65536)
        if not data:
            s.hung_up = True
            return
        had = len(s.received)
        s.received += data[: max(0, _KEPT_BYTES - had)]
        if s.answer is not None and had < CHALLENGE_BYTES <= len(s.received):
            s.to_send += s.answer(bytes(s.received[:CHALLENGE_BYTES]))

    def _forget(self, s: Stranger) -> None:
        self._selector.unregister(s.sock)
        s.sock.close()

    def _loop(self) -> None:
        while True:
            events = self._selector.select(timeout=1.0)
            with self._lock:
                if self._stop:
                    return
                for key, mask in events:
                    s = key.data
                    if s is None:
                        self._wake_r.recv(4096)
                        continue
                    try:
                        if mask & selectors.EVENT_WRITE:
                            self._on_writable(s)
                        if s.failed is None and mask & selectors.EVENT_READ:
                            self._on_readable(s)
                    except (ConnectionResetError, BrokenPipeError):
                        s.hung_up = True
                    except OSError as exc:
                        s.failed = str(exc)
                    if s.hung_up or s.failed is not None:
                        self._forget(s)
                    else:
                        self._selector.modify(s.sock, self._events(s), s)
                self._changed.notify_all()

    def close(self) -> None:
        with self._lock:
            self._stop = True
        self._wake_w.send(b"x")
        self._thread.join(timeout=10)
        for s in self.all:
            s.sock.close()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> "Strangers":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
