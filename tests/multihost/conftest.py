"""Fixtures for the multi-host tests: emulated hosts made per test and removed even when the test fails."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from emulated_hosts import EmulatedHosts, Link, remove_leftovers, why_unavailable  # noqa: E402

_unavailable: list[str | None] = []


def _skip_reason() -> str | None:
    if not _unavailable:
        _unavailable.append(why_unavailable())
        if _unavailable[0] is None:
            remove_leftovers()
    return _unavailable[0]


@pytest.fixture
def make_hosts() -> Iterator[Callable[..., EmulatedHosts]]:
    """``make_hosts(count, link=Link(...))`` builds emulated hosts; all are removed after the test."""
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    made: list[EmulatedHosts] = []

    def make(count: int, link: Link = Link()) -> EmulatedHosts:
        hosts = EmulatedHosts(count, link)
        made.append(hosts)
        return hosts

    try:
        yield make
    finally:
        for hosts in made:
            hosts.close()
