"""collective.run's host lists (-H, --hostfile): parsing, rank placement, local detection, and their errors."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from collective.launcher.hosts import (
    HostSlots,
    SshOptions,
    assign_ranks,
    is_local,
    parse_hostfile,
    parse_hosts,
    remote_rank_request,
    rendezvous_address,
)
from collective.run import main

pytestmark = pytest.mark.timeout(20)


def test_hosts_with_and_without_slots() -> None:
    assert parse_hosts("a:2, b ,c:1") == [HostSlots("a", 2), HostSlots("b", 1), HostSlots("c", 1)]


@pytest.mark.parametrize("text, why", [
    ("", "names no host"), ("a:x", "must be an integer"), ("a:0", "must be >= 1"), ("a:1,a:2", "more than once"),
    (":2", "is not HOST or HOST:SLOTS"),
])
def test_bad_host_lists_are_named(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_hosts(text)


def test_hostfile_in_horovods_format(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text("# cluster\nnode1 slots=4\n\nnode2:2  # two GPUs\nnode3\n")
    assert parse_hostfile(str(path)) == [HostSlots("node1", 4), HostSlots("node2", 2), HostSlots("node3", 1)]
    path.write_text("node1 cores=4\n")
    with pytest.raises(ValueError, match="line 1: expected 'HOST slots=N'"):
        parse_hostfile(str(path))


def test_ranks_fill_hosts_in_order_and_too_many_is_named() -> None:
    hosts = [HostSlots("a", 2), HostSlots("b", 2)]
    assert assign_ranks(hosts, 3) == ["a", "a", "b"]
    with pytest.raises(ValueError, match=r"-np 5 needs more slots than the hosts have \(4: a:2, b:2\)"):
        assign_ranks(hosts, 5)


def test_this_machine_is_local() -> None:
    assert is_local("localhost") and is_local("127.0.0.1") and is_local(socket.gethostname())
    assert not is_local("198.18.255.254")
    assert rendezvous_address([], None) == "127.0.0.1"
    assert rendezvous_address([], ("lo",)) == "127.0.0.1"


def test_ssh_command_carries_the_options() -> None:
    argv = SshOptions(port=2222, identity_file="/k", config_file="/c").command("h", 7.5)
    assert argv[-1] == "h" and "ConnectTimeout=7" in argv
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-i") + 1] == "/k"
    assert argv[argv.index("-F") + 1] == "/c"
    assert b'"COLLECTIVE_SECRET": "s"' in remote_rank_request(["python"], {"COLLECTIVE_SECRET": "s"})


def test_launcher_usage_errors_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "noop.py"
    script.write_text("")
    assert main(["-np", "3", "-H", "localhost:2", str(script)]) == 2
    assert "-np 3 needs more slots" in capsys.readouterr().err
    assert main(["-np", "1", "--network-interface", "nosuchif0", str(script)]) == 2
    assert "no network interface named 'nosuchif0'" in capsys.readouterr().err
    assert main(["-np", "1", "--hostfile", str(tmp_path / "missing"), str(script)]) == 2
    assert "missing" in capsys.readouterr().err


def test_local_hosts_run_without_ssh(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "hello.py"
    script.write_text("import os; print('local', os.environ['HOROVOD_LOCAL_RANK'], os.environ['HOROVOD_HOSTNAME'])\n")
    assert main(["-np", "2", "-H", "localhost:2", str(script)]) == 0
    out = capfd.readouterr().out
    assert "[0]<stdout>:local 0 localhost" in out and "[1]<stdout>:local 1 localhost" in out
