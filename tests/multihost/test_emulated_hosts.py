"""The emulated-host fixture itself: addresses, hostnames, private /dev/shm, links, and a clean teardown."""

from __future__ import annotations

import os
import select
import subprocess
import sys

import pytest

from emulated_hosts import HOST_INTERFACE, EmulatedHosts, Link, delay_supported, why_unavailable

pytestmark = pytest.mark.timeout(60)


def _netns_names() -> set[str]:
    return {line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                       text=True).stdout.splitlines() if line.strip()}


def test_each_host_has_its_own_address_hostname_and_shm(make_hosts) -> None:
    hosts = make_hosts(3)
    for host in hosts.hosts:
        assert hosts.run(host.index, ["hostname"]).stdout.strip() == host.hostname
        addr = hosts.run(host.index, ["ip", "-4", "-o", "addr", "show", "dev", HOST_INTERFACE]).stdout
        assert f"{host.address}/24" in addr
    # A file in one host's /dev/shm is seen by a second process on that host, not by another host.
    assert hosts.run(0, ["sh", "-c", "echo x > /dev/shm/mh-probe"]).returncode == 0
    assert hosts.run(0, ["cat", "/dev/shm/mh-probe"]).stdout.strip() == "x"
    assert hosts.run(1, ["cat", "/dev/shm/mh-probe"]).returncode != 0
    assert not os.path.exists("/dev/shm/mh-probe")  # this namespace's /dev/shm is untouched


def test_hosts_reach_each_other_but_not_this_namespace(make_hosts) -> None:
    hosts = make_hosts(2)
    # A TCP connection from host 0 to a listener on host 1, by address.
    server = hosts.popen(1, [sys.executable, "-c",
                             "import socket;s=socket.create_server(('%s',5555));print('up',flush=True);"
                             "c,_=s.accept();c.sendall(socket.gethostname().encode())" % hosts[1].address])
    assert server.stdout.readline().strip() == b"up"
    got = hosts.run(0, [sys.executable, "-c",
                        "import socket;c=socket.create_connection(('%s',5555),timeout=5);print(c.recv(64).decode())"
                        % hosts[1].address])
    assert got.stdout.strip() == hosts[1].hostname
    # Our own namespace has no route into 198.18.0.0/24 through the emulated bridge.
    routes = subprocess.run(["ip", "route", "get", hosts[1].address], capture_output=True, text=True).stdout
    assert "br0" not in routes


def test_a_rate_limited_link_is_shaped(make_hosts) -> None:
    hosts = make_hosts(2, Link(rate_bps=1e9))
    shown = hosts.run(0, ["tc", "qdisc", "show", "dev", HOST_INTERFACE]).stdout
    assert "tbf" in shown and "rate 1Gbit" in shown


def test_a_delay_needs_netem_or_is_refused_with_the_reason(make_hosts) -> None:
    reason = delay_supported()
    if reason is None:
        hosts = make_hosts(2, Link(delay_ms=0.5))
        assert "netem" in hosts.run(0, ["tc", "qdisc", "show", "dev", HOST_INTERFACE]).stdout
    else:
        with pytest.raises(RuntimeError, match="netem"):
            make_hosts(2, Link(delay_ms=0.5))


def test_close_kills_processes_and_removes_namespaces() -> None:
    if (reason := why_unavailable()) is not None:
        pytest.skip(reason)
    hosts = EmulatedHosts(2)
    names = {hosts.bridge_netns, *(h.netns for h in hosts.hosts)}
    assert names <= _netns_names()
    # A process that leaves our process group is still found in the host's namespace and killed.
    proc = hosts.popen(0, ["sh", "-c", "setsid sh -c 'echo $$; exec cat' </dev/zero & wait"])
    escaped = int(proc.stdout.readline())
    pidfd = os.pidfd_open(escaped)
    hosts.close()
    assert proc.poll() is not None
    assert not (names & _netns_names())
    # The pidfd turns readable when the process has exited (a zombie counts): no polling loop.
    assert select.select([pidfd], [], [], 10)[0] == [pidfd]
    os.close(pidfd)
    hosts.close()  # twice is fine


def test_bad_counts_and_links_are_named() -> None:
    with pytest.raises(ValueError, match="count"):
        EmulatedHosts(0)
    with pytest.raises(ValueError, match="rate"):
        EmulatedHosts(2, Link(rate_bps=0))


def test_the_skip_reason_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import emulated_hosts
    monkeypatch.setattr(emulated_hosts.os, "geteuid", lambda: 1000)
    assert "root" in why_unavailable()
    monkeypatch.setattr(emulated_hosts.os, "geteuid", lambda: 0)
    monkeypatch.setattr(emulated_hosts.shutil, "which", lambda tool: None if tool == "ip" else "/bin/" + tool)
    assert "'ip'" in why_unavailable()
