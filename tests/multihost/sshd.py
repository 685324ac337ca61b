"""sshd inside emulated hosts, for ``collective.run -H`` (test process side).

A throwaway key pair and host key live in the test's directory; the ssh client gets a config file of
its own (``ssh -F``), so neither the machine's ssh configuration nor its known_hosts change.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

from emulated_hosts import EmulatedHosts

SSHD = "/usr/sbin/sshd"
_READY_TIMEOUT_S = 15.0


def why_no_sshd() -> str | None:
    if not os.path.exists(SSHD) or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        return "collective.run -H tests need sshd and ssh (apt-get install -y openssh-server)"
    return None


def start_sshd(hosts: EmulatedHosts, directory: Path) -> Path:
    """Starts sshd on every host's address (port 22) and returns the ssh config file that reaches them."""
    directory.mkdir(parents=True, exist_ok=True)
    key, host_key = directory / "id_ed25519", directory / "host_ed25519"
    for path in (key, host_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True,
                       capture_output=True)
    (directory / "authorized_keys").write_text(Path(f"{key}.pub").read_text())
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory, as its package makes it
    for host in hosts.hosts:
        config = directory / f"sshd_config_{host.index}"
        config.write_text("\n".join([
            "Port 22", f"ListenAddress {host.address}", f"HostKey {host_key}",
            f"AuthorizedKeysFile {directory}/authorized_keys", "PermitRootLogin prohibit-password",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
            "PidFile none", ""]))
        daemon = hosts.popen(host.index, [SSHD, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        _await_listening(daemon, host.hostname)
    client = directory / "ssh_config"
    client.write_text("\n".join([
        "Host *", "  User root", f"  IdentityFile {key}", f"  UserKnownHostsFile {directory}/known_hosts",
        "  StrictHostKeyChecking no", "  LogLevel ERROR", ""]))
    return client


def _await_listening(daemon: subprocess.Popen, hostname: str) -> None:
    timer = threading.Timer(_READY_TIMEOUT_S, daemon.kill)
    timer.start()
    seen = []
    try:
        for raw in daemon.stderr:
            line = raw.decode(errors="replace").strip()
            seen.append(line)
            if "Server listening" in line:
                break
    finally:
        timer.cancel()
    if not seen or "Server listening" not in seen[-1]:
        raise RuntimeError(f"sshd did not start on {hostname}: {' | '.join(seen)[-500:]}")
    # Keep draining its log so that sshd never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in daemon.stderr], daemon=True).start()
