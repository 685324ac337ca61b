"""Host discovery for the elastic launcher: a script that prints the hosts available now, one
``host:slots`` per line (``host`` alone means one slot), as horovodrun's ``--host-discovery-script``.

This module must stay importable without the C++ extension: the launcher uses it.
"""

from __future__ import annotations

import subprocess


class DiscoveryError(RuntimeError):
    """The discovery script failed or printed something that is not ``host[:slots]`` lines."""


def parse_hosts(text: str, source: str) -> dict[str, int]:
    """``{host: slots}`` in the order printed; ``source`` names the script in errors."""
    hosts: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        host, sep, slots_text = line.rpartition(":") if ":" in line else (line, "", "1")
        try:
            slots = int(slots_text)
        except ValueError:
            slots = -1
        if not host or slots < 1 or any(c.isspace() for c in host):
            raise DiscoveryError(f"{source} line {number}: {raw!r} is not 'host:slots' with slots >= 1")
        if host in hosts:
            raise DiscoveryError(f"{source} line {number}: host {host!r} is listed twice")
        hosts[host] = slots
    return hosts


def discover_hosts(script: str, timeout_s: float) -> dict[str, int]:
    """Runs the discovery script once and parses what it prints."""
    try:
        done = subprocess.run([script], capture_output=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DiscoveryError(f"host discovery script {script!r} could not run: {e}") from e
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip()[-500:]
        raise DiscoveryError(f"host discovery script {script!r} exited {done.returncode}: {tail}")
    return parse_hosts(done.stdout.decode("utf-8", "replace"), f"host discovery script {script!r}")
