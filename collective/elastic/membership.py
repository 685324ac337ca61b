"""A worker's side of the elastic rendezvous: which round to join, and the bootstrap that joins it.

``collective.init()`` calls ``round_bootstrap`` when the launcher gave this process a worker id instead of
a rank. Each call joins a round newer than the last one this process tried, so that a re-init after a
lost peer never rejoins the broken formation.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, TypeVar

from collective.bootstrap.base import Bootstrap
from collective.bootstrap.rendezvous import RendezvousClient
from collective.config import Config, parse_host_port
from collective.elastic.errors import ElasticTimeoutError, RoundSupersededError
from collective.elastic.protocol import ROUND_COUNTER_KEY, Round, round_key, round_scope, updated_key

# How long one blocking read of the store lasts before the worker looks for a newer round: a bound on
# how late it notices that the round it waits in was re-formed, not a pause.
_POLL_S = 0.5

# The driver owns the elastic timeout: it alone knows whether slots may still come, and it names the
# shortage. A worker waits this many times longer before it gives up on its own, so that it outlives
# the driver's verdict and only ever decides when the driver itself is gone.
_PATIENCE_FACTOR = 3


def worker_patience_s(elastic_timeout_s: float) -> float:
    """How long a worker waits for a round that lists it before it concludes that the driver is gone."""
    return _PATIENCE_FACTOR * elastic_timeout_s

T = TypeVar("T")

_lock = threading.Lock()
_client: RendezvousClient | None = None
_client_address: tuple[str, bytes | None] | None = None
_last_round = 0


def joined_round() -> int:
    """The round this process last joined (0 before any)."""
    return _last_round


def round_bootstrap(config: Config) -> Bootstrap:
    """Waits (up to ``worker_patience_s``) for the newest round that lists this worker and is newer
    than the last one it joined, and returns the bootstrap that builds that round's mesh."""
    global _last_round
    client = _shared_client(config)
    worker = config.elastic_worker
    deadline = time.monotonic() + worker_patience_s(config.elastic_timeout_s)
    wanted = _last_round + 1
    while True:
        newest = _wait_for_round(client, wanted, deadline, config)
        formation = Round.decode(client.get(round_key(newest), _POLL_S))
        if worker in formation.workers:
            _last_round = newest
            return RoundBootstrap(client, formation, formation.workers.index(worker), config.elastic_timeout_s)
        wanted = newest + 1  # published before this worker was added: the next round will list it


def hosts_updated(round_number: int) -> bool:
    """Whether the driver marked ``round_number`` as replaced by a round with added workers."""
    client = _client
    return client is not None and client.exists(updated_key(round_number))


def forget_client() -> None:
    """Closes the store connection (a test's teardown; a worker keeps it for its lifetime)."""
    global _client, _client_address
    with _lock:
        if _client is not None:
            _client.close()
        _client, _client_address = None, None


def _shared_client(config: Config) -> RendezvousClient:
    """One connection for the process's lifetime, so that 100 re-forms do not open 100 sockets."""
    global _client, _client_address
    if config.rendezvous is None:
        raise ValueError("an elastic worker needs the driver's rendezvous (COLLECTIVE_RENDEZVOUS)")
    address = (config.rendezvous, config.secret)
    with _lock:
        if _client is None or _client_address != address:
            if _client is not None:
                _client.close()
            host, port = parse_host_port(config.rendezvous)
            _client = RendezvousClient(host, port, config.connect_timeout_s, secret=config.secret)
            _client_address = address
        return _client


def _wait_for_round(client: RendezvousClient, wanted: int, deadline: float, config: Config) -> int:
    """The newest published round number, once it is at least ``wanted``."""
    def no_round() -> Exception:
        return ElasticTimeoutError(
            f"elastic worker {config.elastic_worker!r}: no round including it was formed within "
            f"{worker_patience_s(config.elastic_timeout_s):g}s ({_PATIENCE_FACTOR} times the elastic timeout "
            f"of {config.elastic_timeout_s:g}s, after which the driver would have stopped the job); the driver "
            f"is gone")

    def newest_if_late_enough() -> int | None:
        try:
            newest = int(client.get(ROUND_COUNTER_KEY, _POLL_S))
        except TimeoutError:
            return None  # the driver has not published the first round yet
        if newest >= wanted:
            return newest
        _try_get(client, round_key(wanted), _POLL_S)  # wakes as soon as the wanted round is published
        return None

    return _poll_until(newest_if_late_enough, deadline, no_round)


def _try_get(client: RendezvousClient, key: str, timeout_s: float) -> bytes | None:
    """The key's value, or None when it is not set within ``timeout_s``."""
    try:
        return client.get(key, timeout_s)
    except TimeoutError:
        return None


def _poll_until(attempt: Callable[[], T | None], deadline: float, on_timeout: Callable[[], Exception]) -> T:
    """Calls ``attempt`` (which blocks at most one poll) until it returns a value, or raises ``on_timeout()``
    once ``deadline`` passes."""
    while time.monotonic() < deadline:
        value = attempt()
        if value is not None:
            return value
    raise on_timeout()


class RoundBootstrap(Bootstrap):
    """The allgather of one round's members, which gives up as soon as the driver publishes a newer round
    (a member died before the mesh was built) instead of waiting for the dead one until the timeout."""

    def __init__(self, client: RendezvousClient, formation: Round, rank: int, elastic_timeout_s: float) -> None:
        self._client = client
        self._elastic_timeout_s = elastic_timeout_s
        self._round = formation
        self._rank = rank
        self._seq = 0

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return len(self._round.workers)

    def allgather(self, payload: bytes, timeout_s: float) -> list[bytes]:
        prefix = f"{round_scope(self._round.number)}/{self._seq}"
        self._seq += 1
        self._client.set(f"{prefix}/{self._rank}", payload)
        # Members of the last round reach this one at their next commit, which may take longer than a mesh build.
        timeout_s = max(timeout_s, self._elastic_timeout_s)
        deadline = time.monotonic() + timeout_s
        gathered = []
        for peer in range(self.size):
            gathered.append(bytes(payload) if peer == self._rank else self._await_peer(f"{prefix}/{peer}", peer,
                                                                                       deadline, timeout_s))
        return gathered

    def _await_peer(self, key: str, peer: int, deadline: float, timeout_s: float) -> bytes:
        def not_joined() -> Exception:
            return TimeoutError(f"elastic round {self._round.number}: worker "
                                f"{self._round.workers[peer]!r} (rank {peer}) did not join within {timeout_s:g}s")

        def payload_unless_superseded() -> bytes | None:
            payload = _try_get(self._client, key, _POLL_S)
            if payload is None:
                newest = int(self._client.get(ROUND_COUNTER_KEY, _POLL_S))
                if newest > self._round.number:
                    raise RoundSupersededError(
                        f"elastic round {self._round.number} was re-formed as round {newest} while worker "
                        f"{self._round.workers[peer]!r} was awaited")
            return payload

        return _poll_until(payload_unless_superseded, deadline, not_joined)

    def local_address(self) -> str | None:
        return self._client.local_address()

    def close(self) -> None:
        """The connection is the process's (see ``_shared_client``); it stays open."""
