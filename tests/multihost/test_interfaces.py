"""Interface selection across emulated hosts (each has lo and eth0): the default routes to the peers,
nics restrict it, and a wrong or unroutable choice is a named error on every rank rather than a hang."""

from __future__ import annotations

import pytest

from collective import config as cfg
from emulated_hosts import HOST_INTERFACE
from host_jobs import run_on_hosts

pytestmark = pytest.mark.timeout(120)

PLACEMENT = [0, 0, 1, 1]
FAST_FAIL = {cfg.ENV_CONNECT_TIMEOUT: "5"}


@pytest.mark.parametrize("nics", [None, HOST_INTERFACE, f"lo,{HOST_INTERFACE}"])
def test_the_mesh_uses_the_interface_that_routes_to_the_peers(make_hosts, nics: str | None) -> None:
    hosts = make_hosts(2)
    job = run_on_hosts(hosts, PLACEMENT, "interfaces_worker.py", env={cfg.ENV_NICS: nics} if nics else None)
    assert job.returncodes == [0] * 4, job.output
    for rank, host in enumerate(PLACEMENT):
        got = job.record(rank)
        assert got["interfaces"] == {"lo": "127.0.0.1", HOST_INTERFACE: hosts[host].address}
        assert got["mesh_host"] == hosts[host].address
        assert got["total"] == 1 + 2 + 3 + 4


def test_loopback_named_on_one_rank_is_refused_by_every_rank(make_hosts) -> None:
    hosts = make_hosts(2)
    job = run_on_hosts(hosts, PLACEMENT, "interfaces_worker.py", env=FAST_FAIL,
                       per_rank_env=[{}, {}, {cfg.ENV_NICS: "lo"}, {}])
    assert all(code != 0 for code in job.returncodes), job.output
    for rank in range(4):
        assert f"[{rank}]: " in job.output
    assert job.output.count("rank 2 advertises the loopback address 127.0.0.1") == 4, job.output


def test_an_unknown_interface_is_named_with_the_host_and_its_interfaces(make_hosts) -> None:
    hosts = make_hosts(2)
    job = run_on_hosts(hosts, PLACEMENT, "interfaces_worker.py", env=FAST_FAIL,
                       per_rank_env=[{}, {}, {cfg.ENV_NICS: "eth9"}, {}], timeout_s=60)
    assert job.returncodes[2] != 0, job.output
    rank2 = "".join(line for line in job.output.splitlines(keepends=True) if line.startswith("[2]: "))
    assert "no network interface named 'eth9'" in rank2
    assert f"host {hosts[1].hostname}" in rank2 and f"{HOST_INTERFACE} ({hosts[1].address})" in rank2
    assert all(code != 0 for code in job.returncodes)  # the others fail too, within their connect timeout
