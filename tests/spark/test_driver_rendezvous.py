"""The ranks of a barrier stage meet at the store the driver serves (driver_rendezvous.py), not through
BarrierTaskContext.allGather: host keys in rank order, the job's secret required, a missing peer named."""

from __future__ import annotations

import threading

import pytest

from spark_hvd.launch.driver_rendezvous import exchange_host_keys, start_driver_rendezvous

pytestmark = pytest.mark.timeout(60)

SECRET = b"s" * 32


@pytest.fixture
def store():
    server, address = start_driver_rendezvous("127.0.0.1", "127.0.0.1", SECRET, handshake_timeout_s=5.0)
    yield address
    server.stop()


def test_every_rank_gets_every_host_key_in_rank_order(store: str) -> None:
    size = 3
    results: dict[int, list[str]] = {}

    def rank(r: int) -> None:
        results[r] = exchange_host_keys(store, SECRET, r, size, f"host-{r % 2}", connect_timeout_s=5.0)

    # Started in reverse: a rank that arrives first waits for the others.
    threads = [threading.Thread(target=rank, args=(r,)) for r in reversed(range(size))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {r: ["host-0", "host-1", "host-0"] for r in range(size)}


def test_a_missing_peer_is_named_when_the_wait_ends(store: str) -> None:
    with pytest.raises(TimeoutError, match=r"spark_hvd.host_key/1"):
        exchange_host_keys(store, SECRET, 0, 2, "host", connect_timeout_s=5.0, wait_s=0.2)


def test_the_job_secret_is_required(store: str) -> None:
    with pytest.raises(PermissionError, match=r"rejected the job secret"):
        exchange_host_keys(store, b"x" * 32, 0, 1, "host", connect_timeout_s=2.0)
