"""Emulated hosts on this machine (test and benchmark process): network namespaces on a private bridge.

Each host is a network namespace with one veth (``eth0``, an address in 198.18.0.0/15, the range set
aside for network tests) and ``lo``. The veths meet on a bridge that lives in a namespace of its own,
so the machine's own namespace is never touched and no traffic leaves. Each host also has its own
hostname and its own ``/dev/shm``: a holder process per host owns a UTS and a mount namespace (with a
private tmpfs on /dev/shm), and every process started "on" the host enters the holder's namespaces,
so neither host detection nor shared memory can take a shortcut between hosts.

Needs root, ``ip``, ``nsenter`` and ``unshare``; ``why_unavailable()`` says what is missing.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from typing import IO, Mapping, Sequence

SUBNET_PREFIX = "198.18.0."
PREFIX_LEN = 24
HOST_INTERFACE = "eth0"
# Namespace names carry the owning process's pid, so parallel test processes never collide and a
# later run can tell which leftovers belong to a dead process.
_NAME_TAG = "chvd"
_COMMAND_TIMEOUT_S = 20.0
_HOLDER_READY_TIMEOUT_S = 10.0
_KILL_WAIT_S = 10.0


@dataclass(frozen=True)
class Link:
    """A host's link to the bridge: rate in bit/s (None = unlimited), one-way delay in ms (0 = none)."""

    rate_bps: float | None = None
    delay_ms: float = 0.0

    def describe(self) -> str:
        rate = "unlimited" if self.rate_bps is None else f"{self.rate_bps / 1e9:g} Gbit/s"
        return rate + (f" + {self.delay_ms:g} ms" if self.delay_ms else "")


def why_unavailable() -> str | None:
    """None when this process can emulate hosts, else the reason it cannot."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "emulated hosts need root (network namespaces); this process is not root"
    for tool in ("ip", "nsenter", "unshare", "tc"):
        if shutil.which(tool) is None:
            return f"emulated hosts need the '{tool}' command, which is not installed"
    probe = f"{_NAME_TAG}{os.getpid()}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"'ip netns add' failed here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def delay_supported() -> str | None:
    """None when tc can add delay (the netem qdisc), else why not (a kernel without sch_netem)."""
    probe = f"{_NAME_TAG}{os.getpid()}-netem"
    subprocess.run(["ip", "netns", "add", probe], capture_output=True, check=True)
    try:
        added = subprocess.run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root",
                                "netem", "delay", "1ms"], capture_output=True, text=True)
        return None if added.returncode == 0 else f"tc cannot add delay on this kernel: {added.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def remove_leftovers() -> list[str]:
    """Deletes namespaces of this scheme whose owning process is gone (a run that was SIGKILLed)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    removed = []
    for line in listed.splitlines():
        name = line.split()[0] if line.strip() else ""
        if not name.startswith(_NAME_TAG):
            continue
        owner = name[len(_NAME_TAG):].split("-", 1)[0]
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            removed.append(name)
    return removed


def _run(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout


@dataclass
class Host:
    """One emulated host: its namespace, address, hostname and the holder of its UTS/mount namespaces."""

    index: int
    netns: str
    address: str
    hostname: str
    holder: subprocess.Popen | None = None
    processes: list[subprocess.Popen] = field(default_factory=list)

    def enter_argv(self, cwd: str | None = None) -> list[str]:
        """The prefix that runs a command inside this host (its network, hostname and /dev/shm), in ``cwd``
        (default: ours; entering a mount namespace would otherwise move it to /)."""
        assert self.holder is not None
        return ["nsenter", f"--target={self.holder.pid}", "--net", "--uts", "--mount",
                f"--wd={cwd or os.getcwd()}", "--"]


class EmulatedHosts:
    """H emulated hosts; ``close()`` (also run at interpreter exit) removes everything they hold."""

    def __init__(self, count: int, link: Link = Link(), *, tag: str = "t") -> None:
        if not 1 <= count <= 8:
            raise ValueError(f"count must be 1..8 emulated hosts, got {count}")
        if link.delay_ms < 0 or (link.rate_bps is not None and link.rate_bps <= 0):
            raise ValueError(f"link rate must be > 0 and delay >= 0, got {link}")
        self.link = link
        self._lock = threading.Lock()
        self._closed = False
        base = f"{_NAME_TAG}{os.getpid()}-{tag}{id(self) % 10000}"
        self.bridge_netns = f"{base}-br"
        self.hosts = [Host(i, f"{base}-h{i}", f"{SUBNET_PREFIX}{i + 1}", f"emuhost{i}") for i in range(count)]
        atexit.register(self.close)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "EmulatedHosts":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getitem__(self, index: int) -> Host:
        return self.hosts[index]

    def __len__(self) -> int:
        return len(self.hosts)

    @property
    def addresses(self) -> list[str]:
        return [h.address for h in self.hosts]

    def _build(self) -> None:
        _run(["ip", "netns", "add", self.bridge_netns])
        _run(["ip", "-n", self.bridge_netns, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", self.bridge_netns, "link", "set", "br0", "up"])
        for host in self.hosts:
            _run(["ip", "netns", "add", host.netns])
            port = f"v{host.index}"
            # Both ends are created straight inside their namespaces: nothing passes through ours.
            _run(["ip", "-n", self.bridge_netns, "link", "add", port, "type", "veth",
                  "peer", "name", HOST_INTERFACE, "netns", host.netns])
            _run(["ip", "-n", self.bridge_netns, "link", "set", port, "master", "br0", "up"])
            _run(["ip", "-n", host.netns, "addr", "add", f"{host.address}/{PREFIX_LEN}", "dev", HOST_INTERFACE])
            _run(["ip", "-n", host.netns, "link", "set", HOST_INTERFACE, "up"])
            _run(["ip", "-n", host.netns, "link", "set", "lo", "up"])
            self._shape(host)
            host.holder = self._start_holder(host)

    def _shape(self, host: Host) -> None:
        """The host's outgoing traffic gets the link's rate (tbf) and delay (netem, where the kernel has it)."""
        tc = ["ip", "netns", "exec", host.netns, "tc", "qdisc", "add", "dev", HOST_INTERFACE]
        parent = ["root", "handle", "1:"]
        if self.link.rate_bps is not None:
            # A burst of 256 kB lets one TCP window through at line rate (about 111 MB/s at 1 Gbit/s).
            _run([*tc, *parent, "tbf", "rate", f"{int(self.link.rate_bps)}bit", "burst", "256kb", "latency", "50ms"])
            parent = ["parent", "1:1", "handle", "10:"]
        if self.link.delay_ms:
            _run([*tc, *parent, "netem", "delay", f"{self.link.delay_ms}ms", "limit", "100000"])

    def _start_holder(self, host: Host) -> subprocess.Popen:
        """A process owning the host's hostname and /dev/shm; it lives until its stdin closes."""
        script = (f"hostname {host.hostname} && mount -t tmpfs -o size=1g tmpfs /dev/shm "
                  "&& echo ready && exec cat")
        holder = subprocess.Popen(
            ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--mount", "--propagation", "private",
             "sh", "-c", script],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        host.holder = holder
        timer = threading.Timer(_HOLDER_READY_TIMEOUT_S, holder.kill)
        timer.start()
        try:
            line = holder.stdout.readline() if holder.stdout else b""
        finally:
            timer.cancel()
        if line.strip() != b"ready":
            err = holder.stderr.read().decode(errors="replace") if holder.poll() is not None and holder.stderr else ""
            raise RuntimeError(f"host {host.hostname}: its namespace holder did not start: {err.strip()}")
        return holder

    def popen(self, index: int, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              stdout: int | IO | None = subprocess.PIPE, stderr: int | IO | None = subprocess.STDOUT,
              cwd: str | None = None, stdin: int | IO | None = subprocess.DEVNULL) -> subprocess.Popen:
        """Starts ``argv`` on host ``index``; the process (and its group) is killed by ``close()``."""
        host = self.hosts[index]
        with self._lock:
            if self._closed:
                raise RuntimeError("these emulated hosts are closed")
            proc = subprocess.Popen([*host.enter_argv(cwd), *argv], env=None if env is None else dict(env),
                                    stdout=stdout, stderr=stderr, stdin=stdin, start_new_session=True)
            host.processes.append(proc)
        return proc

    def run(self, index: int, argv: Sequence[str], timeout_s: float = _COMMAND_TIMEOUT_S,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
        """Runs ``argv`` on host ``index`` to completion (killed after ``timeout_s``); output as text."""
        host = self.hosts[index]
        return subprocess.run([*host.enter_argv(), *argv], capture_output=True, text=True, timeout=timeout_s,
                              env=None if env is None else dict(env))

    def close(self) -> None:
        """Kills every process started on the hosts, then removes the namespaces. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for host in self.hosts:
            for proc in [*host.processes, *([host.holder] if host.holder else [])]:
                _kill_group(proc)
        for host in self.hosts:
            # Whatever our processes started in a session of its own (a JVM's children, a daemon) is
            # still inside the host's namespace: `ip netns pids` names it, and only our processes live there.
            _kill_pids(host.netns)
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.bridge_netns], capture_output=True)
        atexit.unregister(self.close)


def _kill_pids(netns: str) -> None:
    listed = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
    for pid in (int(p) for p in listed.split() if p.isdigit()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILLs a process we started and its group (it was started in a session of its own), then reaps it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=_KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        pass
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
