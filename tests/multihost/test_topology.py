"""One job across emulated hosts: same-host ranks over shared memory, other hosts over TCP, and the
local and cross ranks of each layout."""

from __future__ import annotations

import pytest

from host_jobs import run_on_hosts

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("placement", [
    pytest.param([0, 0, 1, 1], id="2x2"),
    pytest.param([0, 1, 0, 1], id="2x2-interleaved"),  # Spark's order: hosts alternate by rank
    pytest.param([0, 0, 0, 1], id="3+1"),
])
def test_topology_transports_and_allreduce_across_hosts(make_hosts, placement: list[int]) -> None:
    hosts = make_hosts(2)
    job = run_on_hosts(hosts, placement, "topology_worker.py", "100003")
    assert job.returncodes == [0] * len(placement), job.output
    size = len(placement)
    for rank, host in enumerate(placement):
        got = job.record(rank)
        same_host = [r for r, h in enumerate(placement) if h == host]
        local_rank = same_host.index(rank)
        peers_with_my_local_rank = [r for r, h in enumerate(placement)
                                    if [q for q, g in enumerate(placement) if g == h].index(r) == local_rank]
        assert got["hostname"] == hosts[host].hostname
        assert got["mesh_host"] == hosts[host].address  # never loopback: the peers are elsewhere
        assert (got["local_rank"], got["local_size"]) == (local_rank, len(same_host))
        assert (got["cross_rank"], got["cross_size"]) == (peers_with_my_local_rank.index(rank),
                                                          len(peers_with_my_local_rank))
        assert got["shm"] == {str(p): placement[p] == host for p in range(size) if p != rank}
        assert got["allreduce_ok"] == {"int32": True, "float32": True}
