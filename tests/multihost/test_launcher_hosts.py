"""``python -m collective.run -H``/``--hostfile`` across emulated hosts, remote ranks started over ssh
(sshd runs inside each host): placement and topology, rank-prefixed output, failure of a remote rank,
and an unreachable host."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from host_jobs import WORKERS, rank_environment
from jobs import parse_results
from sshd import start_sshd, why_no_sshd

pytestmark = pytest.mark.timeout(180)

WORKER = str(WORKERS / "launched_worker.py")


@pytest.fixture
def ssh_hosts(make_hosts, tmp_path: Path):
    if (reason := why_no_sshd()) is not None:
        pytest.skip(reason)
    hosts = make_hosts(3)
    return hosts, start_sshd(hosts, tmp_path / "ssh")


def launch_on(hosts, index: int, args: list[str], timeout_s: float = 90) -> tuple[int, str, str]:
    """Runs the launcher on host ``index`` to completion; returns (exit code, stdout, stderr)."""
    proc = hosts.popen(index, [sys.executable, "-m", "collective.run", *args], env=rank_environment(),
                       stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def test_2x2_from_one_of_the_hosts(ssh_hosts) -> None:
    hosts, ssh_config = ssh_hosts
    code, out, err = launch_on(hosts, 0, ["-np", "4", "-H", f"{hosts[0].address}:2,{hosts[1].address}:2",
                                          "--ssh-config", str(ssh_config), "--timeout", "60", WORKER])
    assert code == 0, out + err
    records = {rank: found[0] for rank, found in parse_results(out).items()}
    assert sorted(records) == [0, 1, 2, 3]
    for rank, host in enumerate([0, 0, 1, 1]):
        got = records[rank]
        assert got["hostname"] == hosts[host].hostname
        assert (got["local_rank"], got["local_size"], got["cross_rank"], got["cross_size"]) == (rank % 2, 2, rank // 2, 2)
        assert got["horovod_local_rank"] == str(rank % 2)
        assert got["shm"] == {str(p): p // 2 == rank // 2 for p in range(4) if p != rank}
        assert got["total"] == 10


def test_hostfile_3_plus_1_with_every_rank_remote(ssh_hosts, tmp_path: Path) -> None:
    hosts, ssh_config = ssh_hosts
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(f"# two hosts\n{hosts[0].address} slots=3\n{hosts[1].address} slots=1\n")
    code, out, err = launch_on(hosts, 2, ["-np", "4", "--hostfile", str(hostfile), "--ssh-config", str(ssh_config),
                                          "--network-interface", "eth0", "--timeout", "60", WORKER])
    assert code == 0, out + err
    records = {rank: found[0] for rank, found in parse_results(out).items()}
    assert [records[r]["hostname"] for r in range(4)] == [hosts[h].hostname for h in (0, 0, 0, 1)]
    assert [(records[r]["local_rank"], records[r]["local_size"]) for r in range(4)] == [(0, 3), (1, 3), (2, 3), (0, 1)]
    assert [(records[r]["cross_rank"], records[r]["cross_size"]) for r in range(4)] == [(0, 2), (0, 1), (0, 1), (1, 2)]


def test_a_failing_remote_rank_is_named_and_everyone_stops(ssh_hosts) -> None:
    hosts, ssh_config = ssh_hosts
    code, out, err = launch_on(hosts, 0, ["-np", "4", "-H", f"{hosts[0].address}:2,{hosts[1].address}:2",
                                          "--ssh-config", str(ssh_config), "--term-grace", "2", "--timeout", "60",
                                          WORKER, "--fail-rank", "3"])
    assert code == 3, out + err
    assert "[3]<stderr>:rank 3 fails on purpose" in err
    assert f"rank 3 failed first: on host {hosts[1].address}, exited with code 3" in err
    # Every rank, remote ones included, is gone: each pidfd turns readable once its process has exited.
    pids = [found[0]["pid"] for found in parse_results(out).values()]
    assert len(pids) == 4
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            assert select.select([fd], [], [], 15)[0] == [fd], f"rank process {pid} still runs"
        finally:
            os.close(fd)


def test_an_unreachable_host_is_named_within_the_start_timeout(ssh_hosts) -> None:
    hosts, ssh_config = ssh_hosts
    code, out, err = launch_on(hosts, 0, ["-np", "2", "-H", f"{hosts[0].address}:1,198.18.0.99:1",
                                          "--ssh-config", str(ssh_config), "--start-timeout", "3", WORKER],
                               timeout_s=20)
    assert code == 2, out + err
    assert "cannot reach host(s) over ssh: 198.18.0.99" in err
    assert "RESULT" not in out  # no rank started
