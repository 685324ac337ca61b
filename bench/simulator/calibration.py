"""Bench: this machine's parameters, fitted to bench/sim_calibrate.py's measurements.

Everything on one host is CPU work (shm copies, loopback TCP's kernel copies), so the fit prices CPU: a call's
fixed cost, a message's cost, the wait for a core per round once ranks outnumber cores, and a byte's cost in
and out of the cache (whose effective size is picked from a few choices). Wire latency is fixed, not fitted.
The fit is non-negative least squares on relative error, over the world sizes in ``fit_ranks`` only; the other
world sizes are predictions to check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from .allreduce import allreduce_time
from .cluster import Cluster, Link
from .mesh import Handshakes

FITTED = ("call_s", "cpu_msg_s", "wait_turn_s", "cpu_byte_s", "cpu_byte_mem_s")
WIRE_ALPHA_S = {"shm": 1e-6, "tcp": 10e-6}  # a loopback or shared-memory hop without the CPU work around it


@dataclass(frozen=True)
class Measured:
    transport: str
    ranks: int
    nbytes: int
    seconds: float


def load(path: Path) -> tuple[list[Measured], list[dict]]:
    """The allreduce points and the raw rows (for formation times) of a sim_calibrate JSON file."""
    rows = json.loads(Path(path).read_text())["rows"]
    points = [Measured(r["transport"], r["ranks"], int(n), t) for r in rows for n, t in r["allreduce_s"].items()]
    return points, rows


CACHE_CHOICES = (4 << 20, 8 << 20, 16 << 20, 32 << 20)  # the effective cache is picked on the fit set too


def machine(transport: str, ranks: int, cores: float = 2.0, cache_bytes: float = 32 << 20,
            **params: float) -> Cluster:
    """One host of ``cores`` cores running ``ranks`` ranks over ``transport``; ``params`` the CPU prices."""
    link = Link(alpha_s=WIRE_ALPHA_S[transport], bytes_per_s=1e15)
    base = dict.fromkeys(FITTED, 0.0)
    base.update(params)
    return Cluster(ranks=ranks, ranks_per_host=ranks, cores_per_host=cores, intra=link, inter=link,
                   nic_bytes_per_s=1e15, cache_bytes=cache_bytes, **base)


def _fit_at(chosen: list[Measured], transport: str, cores: float, cache: float) -> tuple[Cluster, float]:
    """The non-negative least-squares fit for one cache size, and its residual."""
    rows, rhs = [], []
    for m in chosen:
        wire = allreduce_time(machine(transport, m.ranks, cores, cache), m.nbytes)
        unit = [allreduce_time(machine(transport, m.ranks, cores, cache, **{name: 1.0}), m.nbytes) - wire
                for name in FITTED]
        rows.append(np.array(unit) / m.seconds)
        rhs.append((m.seconds - wire) / m.seconds)
    theta, residual = nnls(np.array(rows), np.array(rhs))
    return machine(transport, 2, cores, cache, **dict(zip(FITTED, theta))), residual


def fit(points: list[Measured], transport: str, fit_ranks: tuple[int, ...] = (2, 4, 8),
        cores: float = 2.0) -> Cluster:
    """This machine over ``transport`` with FITTED (and the cache size) chosen to match the points at
    ``fit_ranks``."""
    chosen = [m for m in points if m.transport == transport and m.ranks in fit_ranks]
    if not chosen:
        raise ValueError(f"no {transport} measurements at ranks {fit_ranks}")
    return min((_fit_at(chosen, transport, cores, c) for c in CACHE_CHOICES), key=lambda fr: fr[1])[0]


def fit_handshakes(rows: list[dict], transport: str, fit_ranks: tuple[int, ...] = (2, 4, 8),
                   cores: float = 2.0) -> Handshakes:
    """Formation's setup, per-connection wire and CPU prices from the formation times at ``fit_ranks``."""
    chosen = [r for r in rows if r["transport"] == transport and r["ranks"] in fit_ranks]
    a, b = [], []
    for r in chosen:
        p = r["ranks"]
        share = max(1.0, p / cores)
        # full_mesh_time on one host: the last rank's chain of 2(p-1) handshakes bounds it.
        a.append(np.array([1.0, 2 * (p - 1), 4 * (p - 1) * share]) / r["formation_s"])
        b.append(1.0)
    (setup, wire, cpu), _ = nnls(np.array(a), np.array(b))
    return Handshakes(wire_s=wire, cpu_s=cpu, setup_s=setup)


def parameters(cluster: Cluster) -> dict[str, float]:
    return {name: getattr(cluster, name) for name in FITTED}


def at_ranks(cluster: Cluster, ranks: int) -> Cluster:
    return replace(cluster, ranks=ranks, ranks_per_host=ranks)


def emulated_hosts(tcp: Cluster, hosts: int, ranks_per_host: int, link_bytes_per_s: float | None,
                   cores: float = 2.0) -> Cluster:
    """tests/multihost's emulated hosts: network namespaces joined by veth pairs, each host's egress shaped to
    ``link_bytes_per_s`` (None: unshaped), all of them on this machine's ``cores``, at loopback TCP's CPU prices."""
    rate = link_bytes_per_s or 1e15
    link = Link(alpha_s=WIRE_ALPHA_S["tcp"], bytes_per_s=rate)
    return replace(tcp, ranks=hosts * ranks_per_host, ranks_per_host=ranks_per_host,
                   cores_per_host=cores / hosts, inter=link, nic_bytes_per_s=rate)


def load_multihost(path: Path) -> list[dict]:
    """bench/multihost.py's runs of ours: link name, layout and time per size."""
    out = []
    for run in json.loads(Path(path).read_text())["runs"]:
        if "results" not in run or "ours" not in run["results"]:
            continue
        out.append({"link": run["link"], "layout": run["layout"],
                    "times": {int(n): r["time_s"] for n, r in run["results"]["ours"].items()}})
    return out
