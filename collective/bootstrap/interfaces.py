"""Network interfaces by name, and the address a rank listens on and advertises to its peers.

``Config.nics`` (Horovod's ``nics``) restricts the mesh to named interfaces: the rank binds its
listener to, and publishes, the IPv4 address of one of them.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import socket
import struct
import sys
from typing import Sequence

# <linux/sockios.h>: read an interface's (primary) IPv4 address into a struct ifreq.
_SIOCGIFADDR = 0x8915
_IFNAMSIZ = 16
_IFREQ_BYTES = 40
_SIN_ADDR = slice(20, 24)  # ifr_name[16], then sockaddr_in: family(2), port(2), addr(4)
# An interface that exists but has no IPv4 address, or is down without one.
_NO_ADDRESS_ERRNOS = frozenset({errno.EADDRNOTAVAIL, errno.ENODEV})


def interface_addresses() -> dict[str, str | None]:
    """Every network interface of this host by name, with its IPv4 address (None: it has none)."""
    if not sys.platform.startswith("linux"):
        raise OSError(f"selecting network interfaces by name (nics) needs Linux; this is {sys.platform}")
    addresses: dict[str, str | None] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            addresses[name] = _ipv4_address(probe, name)
    return addresses


def _ipv4_address(probe: socket.socket, name: str) -> str | None:
    request = struct.pack(f"{_IFREQ_BYTES}s", name.encode()[:_IFNAMSIZ - 1])
    try:
        reply = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
    except OSError as e:
        if e.errno in _NO_ADDRESS_ERRNOS:
            return None
        raise
    return socket.inet_ntoa(reply[_SIN_ADDR])


def mesh_host(advertise_host: str | None, nics: Sequence[str], local_address: str | None) -> str:
    """The address a rank binds its mesh listener to and publishes to its peers.

    Without ``nics``: ``advertise_host``, else ``local_address`` (the one this process used to
    reach the bootstrap, which peers can usually reach too), else loopback. With ``nics``, the
    address must belong to one of the named interfaces: an explicit ``advertise_host`` is checked,
    ``local_address`` is kept when it qualifies, else the first named interface's address is used.
    Raises ValueError naming the interface and listing this host's interfaces.
    """
    if not nics:
        return advertise_host or local_address or "127.0.0.1"
    allowed = nic_addresses(nics)
    if advertise_host is not None:
        if advertise_host not in allowed:
            raise ValueError(
                f"advertise_host={advertise_host!r} is not an address of the interfaces in "
                f"nics={list(nics)!r} on host {socket.gethostname()} ({_describe(allowed)})")
        return advertise_host
    if local_address in allowed:
        return local_address
    return allowed[0]


def check_reachable(peers: Sequence[dict]) -> None:
    """Refuses a mesh where a rank advertises loopback while ranks on other hosts advertise a routable address.

    ``peers`` are the ranks' mesh records (``host``, ``host_key``) in rank order. Every rank runs the same
    check on the same records, so all of them fail at once with the same message, instead of timing out
    one by one on a connection that can never succeed. All-loopback meshes (one machine, or
    ``host_key_per_rank``) are fine.
    """
    loopback = [rank for rank, peer in enumerate(peers) if _is_loopback(peer["host"])]
    if len(loopback) == len(peers):
        return  # one machine: every rank reaches every other
    on_loopback = set(loopback)
    for rank in loopback:
        remote = [other for other, peer in enumerate(peers)
                  if other not in on_loopback and peer["host_key"] != peers[rank]["host_key"]]
        if remote:
            raise ValueError(
                f"rank {rank} advertises the loopback address {peers[rank]['host']}, but ranks {remote} run on "
                f"other hosts (rank {remote[0]} advertises {peers[remote[0]]['host']}) and cannot reach it; "
                f"name an interface that routes to them (nics, COLLECTIVE_NICS, --network-interface) on rank {rank}")


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def nic_addresses(nics: Sequence[str]) -> list[str]:
    """The IPv4 addresses of the named interfaces, in the order named.

    Every name must be an interface of this host (a typo is an error, not silently skipped); an
    interface without an IPv4 address is skipped, but at least one must have one.
    """
    present = interface_addresses()
    unknown = [name for name in nics if name not in present]
    if unknown:
        raise ValueError(
            f"nics={list(nics)!r}: host {socket.gethostname()} has no network interface named "
            f"{', '.join(repr(n) for n in unknown)}; its interfaces are: {_describe(present)}")
    addresses = [address for address in (present[name] for name in nics) if address is not None]
    if not addresses:
        raise ValueError(
            f"nics={list(nics)!r}: none of these interfaces has an IPv4 address on host "
            f"{socket.gethostname()}; its interfaces are: {_describe(present)}")
    return list(dict.fromkeys(addresses))


def _describe(interfaces: dict[str, str | None] | list[str]) -> str:
    if isinstance(interfaces, list):
        return ", ".join(interfaces)
    return ", ".join(f"{name} ({address or 'no IPv4 address'})" for name, address in interfaces.items())
