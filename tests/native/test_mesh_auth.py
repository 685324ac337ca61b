"""The mesh's HMAC challenge, driven directly through the binding with ranks in threads."""

from __future__ import annotations

import os
import socket
import threading
from typing import Any, Callable

import numpy as np
import pytest

from collective import _native
from collective.errors import AuthenticationError

SECRET = b"s" * 32


class RankThread(threading.Thread):
    """Builds one rank's communicator in a thread (the binding releases the GIL while connecting)."""

    def __init__(self, listener: Any, rank: int, ports: list[int], secret: bytes, connect_timeout_s: float) -> None:
        super().__init__(daemon=True)
        self.args = (listener, rank, ports, secret, connect_timeout_s)
        self.comm: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        listener, rank, ports, secret, connect_timeout_s = self.args
        try:
            options = _native.MeshOptions()
            options.rank, options.size, options.secret = rank, len(ports), secret
            options.hosts, options.ports = ["127.0.0.1"] * len(ports), ports
            options.host_keys = [f"host{r}" for r in range(len(ports))]
            options.enable_shm, options.shm_buffer_bytes, options.tcp_chunk_bytes = False, 1 << 20, 1 << 20
            options.connect_timeout_s, options.timeout_s = connect_timeout_s, 10.0
            self.comm = _native.Communicator(listener, options)
        except BaseException as exc:  # handed to the test thread
            self.error = exc


def in_parallel(*fns: Callable[[], None]) -> None:
    errors: list[BaseException] = []

    def guarded(fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(fn,), daemon=True) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()
    assert not errors, errors


@pytest.mark.timeout(60)
def test_stranger_is_refused_and_the_job_still_forms() -> None:
    listeners = [_native.listen("127.0.0.1") for _ in range(2)]
    ports = [l.port for l in listeners]
    rank0 = RankThread(listeners[0], 0, ports, SECRET, connect_timeout_s=20)
    rank0.start()
    # A stranger answers the challenge with random bytes: rank 0 must hang up on it.
    with socket.create_connection(("127.0.0.1", ports[0]), timeout=10) as stranger:
        challenge = stranger.recv(40)
        assert challenge.startswith(b"SHVDAUT1")
        stranger.sendall(os.urandom(80))  # the size of a real answer
        assert stranger.recv(100) == b"", "rank 0 answered a peer that failed the challenge"
    rank1 = RankThread(listeners[1], 1, ports, SECRET, connect_timeout_s=20)
    rank1.start()
    for t in (rank0, rank1):
        t.join(timeout=30)
        assert t.error is None, t.error
    data = [np.full(10, r + 1.0, np.float32) for r in range(2)]
    in_parallel(*[lambda r=r, comm=rank.comm: comm.run(_native.CollectiveKind.ALLREDUCE, "x", data[r])
                  for r, rank in enumerate((rank0, rank1))])
    for d in data:
        np.testing.assert_array_equal(d, np.full(10, 3.0, np.float32))
    for rank in (rank0, rank1):
        rank.comm.shutdown()


@pytest.mark.timeout(60)
def test_wrong_secret_is_refused_on_both_sides() -> None:
    listeners = [_native.listen("127.0.0.1") for _ in range(2)]
    ports = [l.port for l in listeners]
    rank0 = RankThread(listeners[0], 0, ports, SECRET, connect_timeout_s=3)
    rank1 = RankThread(listeners[1], 1, ports, b"w" * 32, connect_timeout_s=3)
    rank0.start()
    rank1.start()
    rank0.join(timeout=30)
    rank1.join(timeout=30)
    assert isinstance(rank1.error, AuthenticationError), rank1.error
    assert "rank 0 refused" in str(rank1.error) and "secret" in str(rank1.error)
    assert isinstance(rank0.error, AuthenticationError), rank0.error
    assert "rank(s) 1" in str(rank0.error) and "HMAC" in str(rank0.error)


@pytest.mark.timeout(30)
def test_missing_rank_times_out_naming_it() -> None:
    listeners = [_native.listen("127.0.0.1") for _ in range(3)]
    ports = [l.port for l in listeners]
    rank0 = RankThread(listeners[0], 0, ports, SECRET, connect_timeout_s=2)
    rank0.start()
    rank0.join(timeout=20)
    assert isinstance(rank0.error, _native.CollectiveTimeoutError), rank0.error
    assert "rank(s) 1, 2" in str(rank0.error)
