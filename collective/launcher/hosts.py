"""Launcher: ``collective.run -H``/``--hostfile``: the hosts and their slots, which ranks go where, and how a
rank on another host is started (over ssh, through ``collective.launcher.remote_rank``).

This module must stay importable without the C++ extension: it only starts processes.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Mapping, Sequence

from collective.bootstrap.interfaces import interface_addresses, nic_addresses

_LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True)
class HostSlots:
    name: str
    slots: int


@dataclass(frozen=True)
class SshOptions:
    """How to reach other hosts: horovodrun's ``-p``/``-i``, plus an ssh config file (``ssh -F``)."""

    port: int | None = None
    identity_file: str | None = None
    config_file: str | None = None

    def command(self, host: str, connect_timeout_s: float) -> list[str]:
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                "-o", f"ConnectTimeout={max(1, int(connect_timeout_s))}"]
        if self.config_file:
            argv += ["-F", self.config_file]
        if self.port is not None:
            argv += ["-p", str(self.port)]
        if self.identity_file:
            argv += ["-i", self.identity_file]
        return [*argv, host]


def parse_hosts(text: str) -> list[HostSlots]:
    """``host1:2,host2:2`` (a host without ``:N`` has 1 slot), as horovodrun's ``-H``."""
    hosts = [_host_slots(item.strip(), f"-H {text!r}") for item in text.split(",") if item.strip()]
    if not hosts:
        raise ValueError(f"-H {text!r} names no host")
    return _no_repeats(hosts, f"-H {text!r}")


def parse_hostfile(path: str) -> list[HostSlots]:
    """horovodrun's hostfile: one host a line, ``host slots=N`` or ``host:N`` or ``host``; # comments."""
    hosts = []
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            where = f"--hostfile {path} line {number}"
            name, _, rest = line.partition(" ")
            rest = rest.strip()
            if rest:
                key, eq, value = rest.partition("=")
                if key.strip() != "slots" or not eq:
                    raise ValueError(f"{where}: expected 'HOST slots=N', got {line!r}")
                hosts.append(_host_slots(f"{name}:{value.strip()}", where))
            else:
                hosts.append(_host_slots(name, where))
    if not hosts:
        raise ValueError(f"--hostfile {path} names no host")
    return _no_repeats(hosts, f"--hostfile {path}")


def _host_slots(item: str, where: str) -> HostSlots:
    name, _, slots = item.rpartition(":") if ":" in item else (item, "", "1")
    if not name or any(c.isspace() for c in name):
        raise ValueError(f"{where}: {item!r} is not HOST or HOST:SLOTS")
    try:
        count = int(slots)
    except ValueError:
        raise ValueError(f"{where}: slots of {name!r} must be an integer, got {slots!r}") from None
    if count < 1:
        raise ValueError(f"{where}: slots of {name!r} must be >= 1, got {count}")
    return HostSlots(name, count)


def _no_repeats(hosts: list[HostSlots], where: str) -> list[HostSlots]:
    names = [h.name for h in hosts]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{where}: host {repeated[0]!r} is listed more than once")
    return hosts


def assign_ranks(hosts: Sequence[HostSlots], num_proc: int) -> list[str]:
    """The host of every rank: hosts are filled in order, as horovodrun does, so same-host ranks are adjacent."""
    total = sum(h.slots for h in hosts)
    if num_proc > total:
        raise ValueError(f"-np {num_proc} needs more slots than the hosts have ({total}: "
                         f"{', '.join(f'{h.name}:{h.slots}' for h in hosts)})")
    placement = [h.name for h in hosts for _ in range(h.slots)]
    return placement[:num_proc]


def is_local(name: str) -> bool:
    """Whether ``name`` is this machine: loopback, our hostname, or one of our interfaces' addresses."""
    if name in _LOCAL_NAMES or name == socket.gethostname():
        return True
    return name in {a for a in interface_addresses().values() if a}


def rendezvous_address(remote_hosts: Sequence[str], nics: Sequence[str] | None) -> str:
    """The address to serve the rendezvous on: one the remote hosts can reach.

    With ``nics``, the first named interface's address; else the address this machine would use to
    route to the first remote host (never loopback when ranks run elsewhere); loopback if all are local.
    """
    if nics:
        return nic_addresses(nics)[0]
    if not remote_hosts:
        return "127.0.0.1"
    target = socket.getaddrinfo(remote_hosts[0], 9, socket.AF_INET, socket.SOCK_DGRAM)[0][4]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(target)  # a UDP "connect" only picks the route; nothing is sent
        return probe.getsockname()[0]


def check_hosts_reachable(hosts: Sequence[str], ssh: SshOptions, timeout_s: float) -> None:
    """Runs ``ssh HOST true`` on every host at once; raises RuntimeError naming each host that fails
    within ``timeout_s``, with ssh's own reason."""
    def probe(host: str) -> str | None:
        try:
            done = subprocess.run([*ssh.command(host, timeout_s), "true"], stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout_s + 1)
        except subprocess.TimeoutExpired:
            return f"no answer over ssh within {timeout_s:g}s"
        if done.returncode != 0:
            reason = done.stderr.strip().splitlines()[-1:] or [f"ssh exited with code {done.returncode}"]
            return reason[0]
        return None

    if not hosts:
        return
    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        failures = {host: why for host, why in zip(hosts, pool.map(probe, hosts)) if why}
    if failures:
        raise RuntimeError("cannot reach host(s) over ssh: " +
                           "; ".join(f"{host}: {why}" for host, why in failures.items()))


def remote_rank_command(host: str, ssh: SshOptions, timeout_s: float, pythonpath: str | None) -> list[str]:
    """The ssh command that starts ``collective.launcher.remote_rank`` on ``host`` with this interpreter's path;
    the rank's own environment then travels on ssh's stdin (``remote_rank_request``), off command lines."""
    remote = ["env"] + ([f"PYTHONPATH={pythonpath}"] if pythonpath else []) + \
        [sys.executable, "-m", "collective.launcher.remote_rank"]
    return [*ssh.command(host, timeout_s), " ".join(shlex.quote(part) for part in remote)]


def remote_rank_request(argv: Sequence[str], env: Mapping[str, str]) -> bytes:
    """The one line ``collective.launcher.remote_rank`` reads: what to run, where, and with which environment."""
    return (json.dumps({"argv": list(argv), "env": dict(env), "cwd": os.getcwd()}) + "\n").encode()
