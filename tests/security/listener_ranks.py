"""Rank functions for the security tests' spark_hvd.run jobs (shipped by value, so ranks need not import the tests)."""

from __future__ import annotations


def listening_sockets() -> list[tuple[str, int]]:
    """Every TCP socket listening in this network namespace, as (bound address, port), from /proc/net/tcp{,6}."""
    import ipaddress

    found = []
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        try:
            lines = open(table).read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            if state != "0A":  # TCP_LISTEN
                continue
            address_hex, port_hex = local.split(":")
            # The kernel prints the address as 32-bit words in host (little-endian) order.
            raw = b"".join(bytes.fromhex(address_hex[i:i + 8])[::-1] for i in range(0, width * 2, 8))
            found.append((str(ipaddress.ip_address(raw)), int(port_hex, 16)))
    return found


def meet_and_look_at_the_listeners() -> dict:
    """Meets through the task-side rendezvous, then reports which sockets listen while the job still holds them."""
    import numpy as np

    import collective
    from collective.runtime import job_config

    collective.init()
    total = collective.allreduce(np.ones(4) * collective.rank(), op=collective.Sum)
    seen = listening_sockets()
    # Rank 0's task serves the rendezvous until its fn returns: keep every rank here until all have looked.
    collective.allreduce(np.zeros(1), op=collective.Sum)
    return {"rank": collective.rank(), "sum": total.tolist(), "listening": seen,
            "rendezvous": job_config().rendezvous}
