"""Tests of the rendezvous key-value store and the bootstraps built on it (real TCP sockets)."""

from __future__ import annotations

import socket
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import pytest

from collective.bootstrap import (
    RendezvousBootstrap,
    RendezvousClient,
    RendezvousError,
    RendezvousServer,
    SingleRankBootstrap,
    bootstrap_from_config,
)
from collective.bootstrap import rendezvous as rdv
from collective.config import Config, format_host_port


@pytest.fixture
def server() -> Iterator[RendezvousServer]:
    srv = RendezvousServer("127.0.0.1", 0)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def connect(server: RendezvousServer) -> Iterator:
    """Factory for clients of ``server``; every client is closed at teardown."""
    clients: list[RendezvousClient] = []

    def make(timeout_s: float = 10.0, **kwargs: object) -> RendezvousClient:
        client = RendezvousClient(*server.address, timeout_s, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def _raw_socket(server: RendezvousServer, hello: bool) -> socket.socket:
    sock = socket.create_connection(server.address, timeout=5)
    if hello:
        sock.sendall(struct.pack("!4sB", rdv.MAGIC, rdv.PROTOCOL_VERSION))
        rdv._recv_exact(sock, struct.calcsize(f"!4sBB{rdv.NONCE_BYTES}s"))
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends before closing (the socket timeout bounds each recv).

    A reset also counts as closed: the server closes with our unread bytes still queued.
    """
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except ConnectionResetError:
        pass
    return data


@pytest.mark.timeout(30)
def test_set_then_get_across_clients(connect) -> None:
    a, b = connect(), connect()
    a.set("greeting", b"hello\x00world")
    assert b.get("greeting", 5) == b"hello\x00world"
    a.set("greeting", b"")  # overwrite, and empty values are legal
    assert b.get("greeting", 5) == b""
    assert b.exists("greeting") and not b.exists("nobody")


@pytest.mark.timeout(30)
def test_get_blocks_until_another_client_sets(connect) -> None:
    waiter, setter = connect(), connect()
    got: list[bytes] = []
    done = threading.Event()

    def wait_for_key() -> None:
        got.append(waiter.get("late", 20))
        done.set()

    thread = threading.Thread(target=wait_for_key)
    thread.start()
    # A bounded wait for something that must NOT happen: the key does not exist yet.
    assert not done.wait(0.3)
    setter.set("late", b"now")
    assert done.wait(10)
    thread.join(5)
    assert got == [b"now"]


@pytest.mark.timeout(30)
def test_get_timeout_names_the_key(connect) -> None:
    client = connect()
    with pytest.raises(TimeoutError, match="never-set-key"):
        client.get("never-set-key", 0.2)
    client.set("after-timeout", b"ok")  # the connection is still usable
    assert client.get("after-timeout", 1) == b"ok"


@pytest.mark.timeout(30)
def test_wait_lists_all_missing_keys(connect) -> None:
    client = connect()
    client.set("k1", b"1")
    client.wait(["k1"], 1)
    with pytest.raises(TimeoutError) as info:
        client.wait(["k1", "k2", "k3"], 0.2)
    assert "'k2'" in str(info.value) and "'k3'" in str(info.value)
    assert "'k1'" not in str(info.value)


@pytest.mark.timeout(60)
def test_add_is_atomic_under_concurrent_clients(connect) -> None:
    threads, per_thread = 8, 200
    clients = [connect() for _ in range(threads)]

    def hammer(client: RendezvousClient) -> list[int]:
        return [client.add("counter", 1) for _ in range(per_thread)]

    with ThreadPoolExecutor(threads) as pool:
        results = [n for chunk in pool.map(hammer, clients) for n in chunk]
    assert sorted(results) == list(range(1, threads * per_thread + 1))
    assert clients[0].add("counter", -5) == threads * per_thread - 5
    assert clients[0].get("counter", 1) == str(threads * per_thread - 5).encode()


@pytest.mark.timeout(30)
def test_add_on_non_counter_and_oversized_values_are_errors(connect) -> None:
    client = connect()
    client.set("text", b"not a number")
    with pytest.raises(RendezvousError, match="non-counter"):
        client.add("text", 1)
    with pytest.raises(ValueError, match="limit"):
        client.set("big", b"x" * (rdv.DEFAULT_MAX_VALUE_BYTES + 1))
    with pytest.raises(ValueError):
        client.set("k" * (rdv.MAX_KEY_BYTES + 1), b"")
    assert client.delete("text") and not client.delete("text")
    assert client.add("after-errors", 2) == 2  # connection survived server-side errors


@pytest.mark.timeout(30)
def test_delete_prefix_removes_one_rounds_keys_only(connect) -> None:
    client = connect()
    for key in ("job/1/0", "job/1/1", "job/1/all", "job/10/0", "job/1", "other/1/0"):
        client.set(key, b"x")
    assert client.delete_prefix("job/1/") == 3
    assert [k for k in ("job/1/0", "job/1/1", "job/1/all", "job/10/0", "job/1", "other/1/0")
            if client.exists(k)] == ["job/10/0", "job/1", "other/1/0"]
    assert client.delete_prefix("job/1/") == 0


@pytest.mark.timeout(60)
def test_waiters_on_many_keys_each_get_their_own_value(connect) -> None:
    """Requests blocked on different keys at once (as a large allgather's are): each SET answers the
    requests waiting for its key, with its value, and leaves the others waiting."""
    keys = [f"many/{i}" for i in range(12)]
    waiters = [connect() for _ in keys] + [connect() for _ in keys]   # two requests per key
    setter = connect()
    with ThreadPoolExecutor(len(waiters)) as pool:
        futures = [pool.submit(client.get, keys[i % len(keys)], 30) for i, client in enumerate(waiters)]
        for key in reversed(keys):
            setter.set(key, key.encode())
        got = [future.result(timeout=30) for future in futures]
    assert got == [keys[i % len(keys)].encode() for i in range(len(waiters))]


@pytest.mark.timeout(30)
def test_garbage_does_not_hurt_the_server(server: RendezvousServer, connect) -> None:
    bystander = connect()
    bystander.set("before", b"1")

    # Not our protocol at all.
    with _raw_socket(server, hello=False) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _read_until_closed(sock) == b""
    # Valid handshake, then a header announcing a 4 GiB body: refused before allocating.
    # (Only the header is sent, so the error reply is not lost to a reset.)
    with _raw_socket(server, hello=True) as sock:
        sock.sendall(struct.pack("!BHI", rdv.OP_SET, 3, 0xFFFFFFFF))
        reply = _read_until_closed(sock)
        assert reply[0] == rdv.STATUS_ERROR and b"exceeds" in reply
    # Unknown opcode, zero-length key, and a truncated frame.
    for frame in (struct.pack("!BHI", 99, 1, 0) + b"k",
                  struct.pack("!BHI", rdv.OP_GET, 0, 4),
                  struct.pack("!BHI", rdv.OP_SET, 10, 10) + b"abc"):
        with _raw_socket(server, hello=True) as sock:
            sock.sendall(frame)
            try:
                sock.shutdown(socket.SHUT_WR)  # lets the server see the truncation as EOF
            except OSError:
                pass  # the server already rejected the frame and reset the connection
            _read_until_closed(sock)
    # Key that is not UTF-8.
    with _raw_socket(server, hello=True) as sock:
        sock.sendall(struct.pack("!BHI", rdv.OP_GET, 2, 4) + b"\xff\xfe")
        assert b"UTF-8" in _read_until_closed(sock)
    # Connect and vanish without a word.
    socket.create_connection(server.address, timeout=5).close()

    assert bystander.get("before", 1) == b"1"
    late = connect()
    late.set("after", b"2")
    assert bystander.get("after", 1) == b"2"


@pytest.mark.timeout(30)
def test_silent_connection_is_dropped_after_handshake_timeout() -> None:
    with RendezvousServer(handshake_timeout_s=0.3) as srv:
        with socket.create_connection(srv.address, timeout=10) as sock:
            assert _read_until_closed(sock) == b""


@pytest.mark.timeout(30)
def test_secret_is_required_when_server_has_one() -> None:
    with RendezvousServer(secret=b"s3cret") as srv:
        with pytest.raises(PermissionError, match="requires"):
            RendezvousClient(*srv.address, 5)
        with pytest.raises(PermissionError, match="rejected"):
            RendezvousClient(*srv.address, 5, secret=b"wrong")
        with RendezvousClient(*srv.address, 5, secret=b"s3cret") as client:
            client.set("k", b"v")
            assert client.get("k", 1) == b"v"


@pytest.mark.timeout(30)
def test_stop_wakes_blocked_get(server: RendezvousServer, connect) -> None:
    client = connect()
    errors: list[BaseException] = []
    started = threading.Event()

    def blocked_get() -> None:
        started.set()
        try:
            client.get("never", 60)
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            errors.append(e)

    thread = threading.Thread(target=blocked_get)
    thread.start()
    assert started.wait(5)
    server.stop()  # whether the GET is already parked or not, it must fail promptly
    thread.join(10)
    assert not thread.is_alive()
    assert errors and isinstance(errors[0], (RendezvousError, ConnectionError))


@pytest.mark.timeout(30)
def test_a_client_of_another_release_is_told_the_servers_version(server: RendezvousServer) -> None:
    sock = socket.create_connection(server.address, timeout=5)
    sock.sendall(struct.pack("!4sB", rdv.MAGIC, rdv.PROTOCOL_VERSION - 1))
    hello = _read_until_closed(sock)
    sock.close()
    magic, version, _, _ = struct.unpack(f"!4sBB{rdv.NONCE_BYTES}s", hello)
    assert (magic, version) == (rdv.MAGIC, rdv.PROTOCOL_VERSION)


@pytest.mark.timeout(30)
def test_a_server_of_another_release_fails_the_client_at_once_naming_both_versions() -> None:
    older = socket.create_server(("127.0.0.1", 0))
    answered = threading.Event()

    def answer_as_an_older_server() -> None:
        conn, _ = older.accept()
        with conn:
            rdv._recv_exact(conn, struct.calcsize("!4sB"))
            conn.sendall(struct.pack(f"!4sBB{rdv.NONCE_BYTES}s", rdv.MAGIC, 1, 0, bytes(rdv.NONCE_BYTES)))
            answered.set()
            _read_until_closed(conn)

    thread = threading.Thread(target=answer_as_an_older_server)
    thread.start()
    try:
        with pytest.raises(rdv.ProtocolError, match=rf"speaks protocol v1 and this process v{rdv.PROTOCOL_VERSION}"):
            RendezvousClient(*older.getsockname(), 20)
        assert answered.is_set()
    finally:
        thread.join(10)
        older.close()


@pytest.mark.timeout(30)
def test_client_retries_until_server_listens() -> None:
    # Reserve a port, then start the server on it while the client is already retrying.
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    srv = RendezvousServer("127.0.0.1", port)
    connected: list[RendezvousClient] = []
    thread = threading.Thread(
        target=lambda: connected.append(RendezvousClient("127.0.0.1", port, 10)))
    thread.start()
    try:
        srv.start()
        thread.join(15)
        assert connected and connected[0].add("x", 1) == 1
    finally:
        for client in connected:
            client.close()
        srv.stop()


@pytest.mark.timeout(10)
def test_connect_gives_up_at_the_deadline() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with pytest.raises(TimeoutError, match=f"127.0.0.1:{port}"):
        RendezvousClient("127.0.0.1", port, 0.5)


def _allgather_in_threads(server: RendezvousServer, size: int, rounds: list[list[bytes]],
                          scope: str = "test") -> list[list[list[bytes]]]:
    """Runs one RendezvousBootstrap per rank in threads; returns results[rank][round]."""

    def rank_main(rank: int) -> list[list[bytes]]:
        client = RendezvousClient(*server.address, 10)
        with RendezvousBootstrap(client, rank, size, scope) as bootstrap:
            assert bootstrap.local_address() == "127.0.0.1"
            return [bootstrap.allgather(payloads[rank], timeout_s=10) for payloads in rounds]

    with ThreadPoolExecutor(size) as pool:
        return list(pool.map(rank_main, range(size)))


@pytest.mark.timeout(60)
def test_bootstrap_allgather_is_rank_ordered_and_sequenced(server: RendezvousServer) -> None:
    size = 4
    rounds = [[f"first-{r}".encode() for r in range(size)],
              [bytes([r]) * (r * 1000) for r in range(size)]]  # includes an empty payload
    results = _allgather_in_threads(server, size, rounds)
    for rank in range(size):
        assert results[rank] == rounds


@pytest.mark.timeout(60)
def test_bootstrap_rounds_are_cleaned_and_reinit_is_safe(server: RendezvousServer,
                                                          connect) -> None:
    first = [[b"old-%d" % r for r in range(3)]]
    second = [[b"new-%d" % r for r in range(3)]]
    assert _allgather_in_threads(server, 3, first)[0] == first
    # Same scope, same server, fresh bootstraps: must not see the first job's payloads.
    assert _allgather_in_threads(server, 3, second)[0] == second
    assert not connect().exists("test/1/0/0")  # the last reader removed the round


@pytest.mark.timeout(30)
def test_bootstrap_timeout_names_missing_ranks(server: RendezvousServer) -> None:
    client = RendezvousClient(*server.address, 10)
    with RendezvousBootstrap(client, 0, 3, "lonely") as bootstrap:
        with pytest.raises(TimeoutError, match=r"rank\(s\) \[1, 2\]"):
            bootstrap.allgather(b"x", timeout_s=0.3)


@pytest.mark.timeout(30)
def test_bootstrap_from_config_single_rank_without_rendezvous() -> None:
    for config in (Config(), Config(size=1), Config(rank=0, size=1)):
        bootstrap = bootstrap_from_config(config)
        assert isinstance(bootstrap, SingleRankBootstrap)
        assert (bootstrap.rank, bootstrap.size) == (0, 1)
        assert bootstrap.allgather(b"solo", 1) == [b"solo"]
        assert bootstrap.local_address() is None


@pytest.mark.timeout(30)
def test_bootstrap_from_config_reports_missing_settings() -> None:
    with pytest.raises(ValueError, match="COLLECTIVE_RENDEZVOUS"):
        bootstrap_from_config(Config(rank=0, size=2))
    with pytest.raises(ValueError, match="COLLECTIVE_RANK"):
        bootstrap_from_config(Config(size=2, rendezvous="127.0.0.1:1"))
    with pytest.raises(ValueError, match="COLLECTIVE_SIZE"):
        bootstrap_from_config(Config(rank=0, rendezvous="127.0.0.1:1"))


@pytest.mark.timeout(60)
def test_bootstrap_from_config_over_rendezvous_with_secret() -> None:
    secret = b"job-secret"
    with RendezvousServer(secret=secret) as srv:
        address = format_host_port(*srv.address)

        def rank_main(rank: int) -> list[bytes]:
            config = Config(rank=rank, size=2, rendezvous=address, secret=secret,
                            connect_timeout_s=10)
            with bootstrap_from_config(config) as bootstrap:
                return bootstrap.allgather(b"%d" % rank, timeout_s=10)

        with ThreadPoolExecutor(2) as pool:
            assert list(pool.map(rank_main, range(2))) == [[b"0", b"1"]] * 2
