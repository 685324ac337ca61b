"""Hostile peers for tests/security: what a stranger on the network does to a listener, with no secret, or with a
handshake it captured. Run as a process of its own against a real job, as an attacker would be:

    python hostile_peers.py rendezvous|collector HOST:PORT [SECRET_HEX] [--idle N]

It opens N idle connections (1,200 by default: more than a thousand) and prints ``READY {...}``; then, until its
stdin closes, it runs rounds: one random, one oversized, one wrong-HMAC and one replayed handshake, ``ROUND n``,
and the idle ones topped back up to N, four times a second. At the end it prints ``DONE {...}``: how each kind
was answered ("refused", "accepted", "open" when the server still held it after a few seconds, "unreachable"
when nothing listened).
SECRET_HEX lets it forge the captured handshake it replays; it never completes a handshake of its own.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import resource
import select
import selectors
import socket
import struct
import sys
from dataclasses import dataclass
from typing import Callable

_VERDICT_WAIT_S = 3.0
_CONNECT_TIMEOUT_S = 3.0
_TOP_UP_EVERY_S = 0.25
OVERSIZED_BYTES = 1 << 20


@dataclass(frozen=True)
class Protocol:
    """A listener's handshake as a client sees it."""

    name: str
    client_hello: bytes              # what the client sends before the server's hello (empty: nothing)
    server_hello_bytes: int
    nonce: Callable[[bytes], bytes]  # the nonce in the server's hello
    reply: Callable[[bytes, bytes], bytes]  # the client's authenticated answer: reply(secret, nonce)


def _rendezvous() -> Protocol:
    from collective.bootstrap import rendezvous as rdv

    hello = struct.pack("!4sB", rdv.MAGIC, rdv.PROTOCOL_VERSION)
    server_hello = struct.calcsize(f"!4sBB{rdv.NONCE_BYTES}s")
    return Protocol(
        "rendezvous", hello, server_hello, nonce=lambda h: h[6:6 + rdv.NONCE_BYTES],
        reply=lambda secret, nonce: hmac.new(secret, rdv.AUTH_CONTEXT + nonce, hashlib.sha256).digest())


def _collector() -> Protocol:
    from spark_hvd.launch.task import output_channel as oc

    return Protocol(
        "collector", b"", oc.SERVER_HELLO_BYTES, nonce=lambda h: h[5:5 + oc.NONCE_BYTES],
        reply=lambda secret, nonce: struct.pack("!I", 0) + oc.auth_digest(secret, nonce, 0))


PROTOCOLS: dict[str, Callable[[], Protocol]] = {"rendezvous": _rendezvous, "collector": _collector}


def raise_fd_limit(needed: int) -> None:
    """Lets this process hold ``needed`` more sockets (up to the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = soft + needed if hard == resource.RLIM_INFINITY else min(hard, soft + needed)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def connect(address: tuple[str, int]) -> socket.socket | None:
    try:
        return socket.create_connection(address, timeout=_CONNECT_TIMEOUT_S)
    except OSError:
        return None


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    try:
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
    except OSError:
        return None
    return data


def _outcome(sock: socket.socket, verdict_expected: bool) -> str:
    """How the server treats us from here: 'accepted' (it said yes), 'refused' (it said no or closed), or
    'open' (it still holds the connection after a few seconds)."""
    sock.settimeout(_VERDICT_WAIT_S)
    try:
        first = sock.recv(1)
    except TimeoutError:
        return "open"
    except OSError:
        return "refused"
    if verdict_expected and first == b"\x01":
        return "accepted"
    if not first:
        return "refused"
    try:
        while sock.recv(4096):  # anything else: it must still close on us
            pass
    except TimeoutError:
        return "open"
    except OSError:
        pass
    return "refused"


def _server_hello(sock: socket.socket, protocol: Protocol) -> bytes | None:
    try:
        sock.sendall(protocol.client_hello)
    except OSError:
        return None
    return _recv_exactly(sock, protocol.server_hello_bytes)


def random_bytes(address: tuple[str, int], protocol: Protocol, secret: bytes | None) -> str:
    """Bytes that are no protocol at all."""
    with _open(address) as sock:
        if sock is None:
            return "unreachable"
        try:
            sock.sendall(os.urandom(64))
        except OSError:
            return "refused"
        return _outcome(sock, verdict_expected=False)


def oversized(address: tuple[str, int], protocol: Protocol, secret: bytes | None) -> str:
    """A hello, then a megabyte where a few dozen bytes belong."""
    with _open(address) as sock:
        if sock is None:
            return "unreachable"
        try:
            sock.settimeout(_VERDICT_WAIT_S)
            sock.sendall(protocol.client_hello + os.urandom(OVERSIZED_BYTES))
        except OSError:
            return "refused"  # it closed on us mid-send: it read no more than it needed
        return _outcome(sock, verdict_expected=False)


def wrong_hmac(address: tuple[str, int], protocol: Protocol, secret: bytes | None) -> str:
    """The protocol followed to the letter, answered with the wrong secret."""
    with _open(address) as sock:
        if sock is None:
            return "unreachable"
        hello = _server_hello(sock, protocol)
        if hello is None:
            return "refused"
        try:
            sock.sendall(protocol.reply(os.urandom(32), protocol.nonce(hello)))
        except OSError:
            return "refused"
        return _outcome(sock, verdict_expected=True)


def replayed(address: tuple[str, int], protocol: Protocol, secret: bytes | None) -> str:
    """A valid answer to one connection's nonce (as if sniffed), replayed on another."""
    if secret is None:
        return wrong_hmac(address, protocol, secret)
    with _open(address) as first:
        if first is None:
            return "unreachable"
        hello = _server_hello(first, protocol)
        if hello is None:
            return "refused"
        captured = protocol.reply(secret, protocol.nonce(hello))
    with _open(address) as sock:
        if sock is None:
            return "unreachable"
        if _server_hello(sock, protocol) is None:
            return "refused"
        try:
            sock.sendall(captured)
        except OSError:
            return "refused"
        return _outcome(sock, verdict_expected=True)


ACTIONS: dict[str, Callable[[tuple[str, int], Protocol, bytes | None], str]] = {
    "random": random_bytes, "oversized": oversized, "wrong_hmac": wrong_hmac, "replayed": replayed,
}


class _open:
    """A connection for one action, closed afterwards (None when the server would not take it)."""

    def __init__(self, address: tuple[str, int]) -> None:
        self._sock = connect(address)

    def __enter__(self) -> socket.socket | None:
        return self._sock

    def __exit__(self, *exc: object) -> None:
        if self._sock is not None:
            self._sock.close()


class IdleFlood:
    """Connections that never say a word; ``top_up()`` replaces the ones the server closed."""

    def __init__(self, address: tuple[str, int], size: int) -> None:
        self._address = address
        self._size = size
        self._selector = selectors.DefaultSelector()
        self.opened = 0
        self.closed_by_server = 0
        self.top_up()

    def top_up(self) -> None:
        self._reap()
        while len(self._selector.get_map()) < self._size:
            sock = connect(self._address)
            if sock is None:
                return  # the server's queue is full: try again next round
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ)
            self.opened += 1

    def _reap(self) -> None:
        for key, _ in self._selector.select(0):
            sock = key.fileobj
            try:
                if sock.recv(4096):  # type: ignore[union-attr]
                    continue  # the server's hello: stay silent
            except BlockingIOError:
                continue
            except OSError:
                pass
            self._selector.unregister(sock)
            sock.close()  # type: ignore[union-attr]
            self.closed_by_server += 1

    def close(self) -> None:
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()


def main(argv: list[str]) -> int:
    kind, address_text = argv[0], argv[1]
    rest = argv[2:]
    idle = 1200
    if "--idle" in rest:
        at = rest.index("--idle")
        idle = int(rest[at + 1])
        del rest[at:at + 2]
    secret = bytes.fromhex(rest[0]) if rest else None
    host, _, port = address_text.rpartition(":")
    address = (host, int(port))
    protocol = PROTOCOLS[kind]()
    raise_fd_limit(idle + 64)
    flood = IdleFlood(address, idle)
    stats: dict[str, dict[str, int]] = {name: {} for name in ACTIONS}
    print("READY " + json.dumps({"idle": flood.opened}), flush=True)
    rounds = 0
    while True:
        for name, action in ACTIONS.items():
            outcome = action(address, protocol, secret)
            stats[name][outcome] = stats[name].get(outcome, 0) + 1
        rounds += 1
        print(f"ROUND {rounds}", flush=True)
        # Waiting on stdin paces the rounds and ends them the moment the test closes it.
        if select.select([sys.stdin], [], [], _TOP_UP_EVERY_S)[0] and not sys.stdin.buffer.read1(1):
            break
        flood.top_up()
    summary = {"idle_opened": flood.opened, "idle_closed_by_server": flood.closed_by_server, "actions": stats}
    flood.close()
    print("DONE " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
