"""The host layout every mesh derives from its ranks' host keys: which ranks share a host, and the order
rings, chains and the hierarchy follow (host by host, never rank order)."""

from __future__ import annotations

import pytest

from collective import _native
from collective.topology import topology_from_host_keys


@pytest.mark.parametrize("keys, hosts, ring", [
    # Spark interleaves hosts: a ring in rank order would cross the network on every hop.
    (["A", "B", "A", "B"], [[0, 2], [1, 3]], [0, 2, 1, 3]),
    (["A", "A", "A", "B"], [[0, 1, 2], [3]], [0, 1, 2, 3]),
    (["B", "A", "A", "B", "C"], [[0, 3], [1, 2], [4]], [0, 3, 1, 2, 4]),
    (["A"] * 3, [[0, 1, 2]], [0, 1, 2]),
    (["A", "B", "C"], [[0], [1], [2]], [0, 1, 2]),
])
def test_hosts_in_order_of_their_lowest_rank(keys: list[str], hosts: list[list[int]], ring: list[int]) -> None:
    assert _native.host_layout(keys) == (hosts, ring)


@pytest.mark.parametrize("keys", [["A", "B", "A", "B"], ["A", "A", "A", "B"], ["x", "y", "y", "x", "z", "y"]])
def test_local_ranks_agree_with_the_python_topology(keys: list[str]) -> None:
    # collective.topology (local_rank, local_size: what users read) and the native layout (what the
    # algorithms follow) are computed on two sides of the binding; they must describe the same hosts.
    hosts, _ = _native.host_layout(keys)
    for members in hosts:
        for local_rank, rank in enumerate(members):
            topology = topology_from_host_keys(rank, keys)
            assert (topology.local_rank, topology.local_size) == (local_rank, len(members))


@pytest.mark.parametrize("keys, homogeneous", [
    (["A", "B", "A", "B"], True), (["A", "A", "A", "B"], False), (["A"] * 3, True), (["x", "y", "y", "x", "z", "z"], True),
    (["x", "y", "y", "x", "z"], False),
])
def test_is_homogeneous_when_every_host_runs_as_many_ranks(keys: list[str], homogeneous: bool) -> None:
    assert all(topology_from_host_keys(rank, keys).homogeneous is homogeneous for rank in range(len(keys)))
