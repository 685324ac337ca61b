"""The keys the elastic driver and its workers share in the rendezvous store, and what they hold.

A *round* is one formation of the job: the driver publishes its member list (worker ids in rank order),
then bumps the round counter, so a worker that reads the counter always finds the round it names. While a
round runs, the driver marks it "updated" when it has formed the next one for added workers: the members
learn it at their next commit (``State.check_host_updates``) and move on together.

This module must stay importable without the C++ extension: the launcher uses it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

ROUND_COUNTER_KEY = "elastic/round"


def round_key(round_number: int) -> str:
    return f"elastic/round/{round_number}"


def updated_key(round_number: int) -> str:
    return f"elastic/updated/{round_number}"


def round_scope(round_number: int) -> str:
    """The rendezvous scope a round's members build their mesh in."""
    return f"elastic/mesh/{round_number}"


@dataclass(frozen=True)
class Round:
    number: int
    workers: tuple[str, ...]  # worker ids in rank order

    def encode(self) -> bytes:
        return json.dumps({"number": self.number, "workers": list(self.workers)}).encode()

    @staticmethod
    def decode(raw: bytes) -> "Round":
        record = json.loads(raw)
        return Round(int(record["number"]), tuple(record["workers"]))
