"""Runs on an emulated host: serves a job's rendezvous on that host's address until stdin closes.

    python rendezvous_host.py ADDRESS SECRET_HEX   -> prints "port N", then serves
"""

from __future__ import annotations

import sys

from collective.bootstrap import RendezvousServer

if __name__ == "__main__":
    address, secret_hex = sys.argv[1], sys.argv[2]
    with RendezvousServer(address, 0, secret=bytes.fromhex(secret_hex)) as server:
        print(f"port {server.address[1]}", flush=True)
        sys.stdin.read()  # the test closes our stdin (or kills us) when the job is over
