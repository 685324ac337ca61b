"""Driver and task: the ranks of a barrier stage meet at a rendezvous store the driver serves for the run.

Spark's ``BarrierTaskContext.allGather`` answers on a one-second poll (the JVM side of a barrier call checks
its reply once a second), so meeting through it cost every launch about a second, whatever the cluster.
Where the tasks can dial the driver (they already do, for the output collector), the driver serves
collective's rendezvous store for the run, with the job's secret: each task publishes its host key there
and reads its peers' (a few milliseconds), and the ranks' ``collective.init()`` meets at the same store.
Under Spark Connect the driver cannot be dialled, and with ``nics`` the store must listen on interfaces the
driver's host may not have: there the ranks meet through the allGather, at a store rank 0 serves, as before.
"""

from __future__ import annotations

from collective.bootstrap import RendezvousClient, RendezvousServer
from collective.config import format_host_port, parse_host_port

# Keys of the host exchange; collective.init() uses its own scope ("collective/...") in the same store.
_HOST_KEY_PREFIX = "spark_hvd.host_key/"
# How long a task waits for its peers' host keys. The stage's tasks start together; the driver's start
# timeout, or its cancelling of the job when a rank fails, ends a longer wait first.
PEERS_WAIT_S = 3600.0


def start_driver_rendezvous(bind_host: str, advertised_host: str, secret: bytes,
                            handshake_timeout_s: float) -> tuple[RendezvousServer, str]:
    """The run's store, listening on ``bind_host``; returns it and the "host:port" the tasks dial."""
    server = RendezvousServer(bind_host, 0, secret=secret, handshake_timeout_s=handshake_timeout_s)
    server.start()
    return server, format_host_port(advertised_host, server.address[1])


def exchange_host_keys(address: str, secret: bytes, rank: int, size: int, host_key: str,
                       connect_timeout_s: float, wait_s: float = PEERS_WAIT_S) -> list[str]:
    """Publishes this rank's host key and returns every rank's, in rank order."""
    host, port = parse_host_port(address)
    client = RendezvousClient(host, port, timeout_s=connect_timeout_s, secret=secret)
    try:
        client.set(f"{_HOST_KEY_PREFIX}{rank}", host_key.encode())
        return [client.get(f"{_HOST_KEY_PREFIX}{peer}", wait_s).decode() for peer in range(size)]
    finally:
        client.close()
