"""Allreduce across emulated hosts, against gloo and Open MPI over tcp, with each host's link rate as the limit.

    .venv/bin/python bench/multihost.py [--sizes 64K 1M 16M 64M] [--layouts 2x1 4x1 2x2]
                                        [--links unlimited 1g 1g+0.5ms] [--impls ours gloo mpi]
                                        [--variant LABEL:NAME=VALUE,...] [--target-s S] [--quick]

Needs root (network namespaces; see tests/multihost/emulated_hosts.py). For every link setting it builds
4 emulated hosts, each with its own address, hostname and /dev/shm and an egress link shaped by tc, and runs
every (layout, implementation) there, all with bench/_allreduce_worker.py (float32 SUM, in place):
- ours: ranks bootstrapped by a rendezvous on rank 0's host; shm within a host, tcp across;
- gloo: torch.distributed over env://, GLOO_SOCKET_IFNAME=eth0;
- mpi: Open MPI (ob1, btl self,sm,tcp on eth0) started by mpirun on host 0, which reaches the other hosts
  through a launch agent that enters their namespaces (plm_rsh_agent), as ssh would on real hosts.
A layout HxR is H hosts with R ranks each, ranks filling hosts in order.
busbw = bytes x 2(p-1)/p / time (p ranks); "link" = busbw / the link rate; ours/peer = peer's time / ours.
``--variant hier:COLLECTIVE_X=1`` adds our implementation again with extra environment (e.g. to compare
allreduce algorithms). Raw data go to bench/results/multihost-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent / "tests" / "multihost"))

from allreduce import MARKER, MPI_COMMON, human_size, parse_size  # noqa: E402
from emulated_hosts import HOST_INTERFACE, EmulatedHosts, Link, delay_supported, why_unavailable  # noqa: E402
from host_jobs import HostJob, rank_environment, run_ranks, serve_rendezvous  # noqa: E402

from collective.config import env_for_rank  # noqa: E402

WORKER = BENCH_DIR / "_allreduce_worker.py"
LINKS = {"unlimited": Link(), "1g": Link(rate_bps=1e9), "1g+0.5ms": Link(rate_bps=1e9, delay_ms=0.5)}
LAYOUTS = {"2x1": (2, 1), "4x1": (4, 1), "2x2": (2, 2)}
DEFAULT_SIZES = ("64K", "256K", "1M", "4M", "16M", "64M")
QUICK_SIZES = ("64K", "1M", "16M", "64M")
PEERS = ("gloo", "mpi")
GLOO_PORT = "29500"  # every job has hosts of its own, so a fixed port cannot collide


@dataclass(frozen=True)
class Variant:
    label: str
    env: dict[str, str]


def parse_variant(text: str) -> Variant:
    label, _, assignments = text.partition(":")
    env = {}
    for item in filter(None, assignments.split(",")):
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise argparse.ArgumentTypeError(f"--variant {text!r}: {item!r} is not NAME=VALUE")
        env[name] = value
    if not label or label in PEERS:
        raise argparse.ArgumentTypeError(f"--variant {text!r} needs a label other than {PEERS}")
    return Variant(label, env)


def placement_of(layout: str) -> list[int]:
    hosts, per_host = LAYOUTS[layout]
    return [host for host in range(hosts) for _ in range(per_host)]


def worker_argv(sizes: list[int], args: argparse.Namespace, impl: str, label: str) -> list[str]:
    return [sys.executable, str(WORKER), "--impl", impl, "--label", label, "--sizes", *map(str, sizes),
            "--target-s", str(args.target_s), "--min-iters", str(args.min_iters)]


def run_ours(hosts: EmulatedHosts, placement: list[int], argv: list[str], extra: dict[str, str],
             timeout_s: float) -> HostJob:
    secret = secrets.token_bytes(16)
    server, rendezvous = serve_rendezvous(hosts, placement[0], secret)

    def env(rank: int) -> dict[str, str]:
        return {**rank_environment(extra), **env_for_rank(rank, len(placement), rendezvous, secret)}

    try:
        return run_ranks(hosts, placement, lambda rank: argv, env, timeout_s)
    finally:
        server.kill()
        server.wait()


def run_gloo(hosts: EmulatedHosts, placement: list[int], argv: list[str], timeout_s: float) -> HostJob:
    def env(rank: int) -> dict[str, str]:
        local_rank = placement[:rank].count(placement[rank])
        return rank_environment({"MASTER_ADDR": hosts[placement[0]].address, "MASTER_PORT": GLOO_PORT,
                                 "WORLD_SIZE": str(len(placement)), "RANK": str(rank),
                                 "LOCAL_RANK": str(local_rank), "GLOO_SOCKET_IFNAME": HOST_INTERFACE})

    return run_ranks(hosts, placement, lambda rank: argv, env, timeout_s)


def launch_agent(hosts: EmulatedHosts, path: Path) -> Path:
    """A stand-in for ssh that mpirun calls as ``agent HOST COMMAND...``: runs COMMAND inside that host."""
    lines = ["#!/bin/sh", 'host="$1"; shift', 'case "$host" in']
    for host in hosts.hosts:
        lines.append(f'  {host.address}|{host.hostname}) exec {" ".join(host.enter_argv("/"))} /bin/sh -c "$*" ;;')
    lines += ['  *) echo "launch agent: no emulated host named $host" >&2; exit 255 ;;', "esac", ""]
    path.write_text("\n".join(lines))
    path.chmod(0o755)
    return path


def run_mpi(hosts: EmulatedHosts, placement: list[int], argv: list[str], agent: Path, timeout_s: float) -> HostJob:
    counts = {host: placement.count(host) for host in dict.fromkeys(placement)}
    host_list = ",".join(f"{hosts[h].address}:{n}" for h, n in counts.items())
    mpirun = str(Path(sys.executable).parent / "mpirun")
    command = [mpirun, "-n", str(len(placement)), "--host", host_list, *MPI_COMMON,
               "--mca", "btl", "self,sm,tcp", "--mca", "btl_tcp_if_include", HOST_INTERFACE,
               "--mca", "oob_tcp_if_include", HOST_INTERFACE, "--mca", "plm_rsh_agent", str(agent),
               # Every emulated host shares this machine's few cores; MPI's busy polling would starve the
               # other ranks (it yields by default only when it knows a node is oversubscribed).
               "--mca", "mpi_yield_when_idle", "true", *argv]
    env = rank_environment({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    # One process (mpirun) on rank 0's host; its output carries every rank's lines.
    return run_ranks(hosts, placement[:1], lambda rank: command, lambda rank: env, timeout_s)


def cells(job: HostJob, ranks: int, sizes: list[int]) -> dict[int, dict[str, Any]]:
    """Per size: the slowest rank's median time (what a training step waits for), or the error."""
    found: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
    for line in job.output.splitlines():
        at = line.find(MARKER)
        if at >= 0:
            record = json.loads(line[at + len(MARKER):])
            found.setdefault(record["bytes"], []).append(record)
    out: dict[int, dict[str, Any]] = {}
    tail = " | ".join(job.output.strip().splitlines()[-3:])[-300:]
    for nbytes in sizes:
        records = found[nbytes]
        if len(records) != ranks:
            out[nbytes] = {"error": f"exit codes {job.returncodes}: {tail}"}
        elif not all(r["correct"] for r in records):
            out[nbytes] = {"error": "wrong result"}
        else:
            time_s = max(r["median_s"] for r in records)
            out[nbytes] = {"time_s": time_s, "busbw": nbytes * 2 * (ranks - 1) / ranks / time_s}
    return out


def print_table(link_name: str, link: Link, layout: str, sizes: list[int], impls: list[str],
                results: dict[str, dict[int, dict[str, Any]]]) -> None:
    ours = [i for i in impls if i not in PEERS]
    peers = [i for i in impls if i in PEERS]
    rate = None if link.rate_bps is None else link.rate_bps / 8
    print(f"\n### {layout}, link {link.describe()} ({link_name})\n")
    head = ["size"] + [f"{i} busbw MB/s" for i in impls]
    if rate:
        head += [f"{i} ÷ link" for i in impls]
    head += [f"{o} ÷ {p}" for o in ours for p in peers]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for nbytes in sizes:
        row = [human_size(nbytes)]
        got = {i: results.get(i, {}).get(nbytes, {"error": "not run"}) for i in impls}
        row += [f"{got[i]['busbw'] / 1e6:.1f}" if "busbw" in got[i] else "error" for i in impls]
        if rate:
            row += [f"{got[i]['busbw'] / rate:.2f}" if "busbw" in got[i] else "-" for i in impls]
        for o in ours:
            for p in peers:
                both = "time_s" in got[o] and "time_s" in got[p]
                row.append(f"{got[p]['time_s'] / got[o]['time_s']:.2f}" if both else "-")
        print("| " + " | ".join(row) + " |")
    for impl in impls:
        errors = {human_size(n): c["error"] for n, c in results.get(impl, {}).items() if "error" in c}
        if errors:
            print(f"\n{impl} errors: {json.dumps(errors)[:600]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=parse_size, nargs="+", default=None)
    parser.add_argument("--layouts", nargs="+", choices=list(LAYOUTS), default=list(LAYOUTS))
    parser.add_argument("--links", nargs="+", choices=list(LINKS), default=list(LINKS))
    parser.add_argument("--impls", nargs="+", choices=["ours", *PEERS], default=["ours", *PEERS])
    parser.add_argument("--variant", type=parse_variant, action="append", default=[],
                        help="LABEL:NAME=VALUE,... runs ours again with that environment")
    parser.add_argument("--target-s", type=float, default=0.5, help="timed work per size and implementation")
    parser.add_argument("--min-iters", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per job")
    parser.add_argument("--quick", action="store_true", help=f"sizes {' '.join(QUICK_SIZES)}, target 0.3 s")
    args = parser.parse_args(argv)
    if (reason := why_unavailable()) is not None:
        print(f"cannot emulate hosts: {reason}", file=sys.stderr)
        return 2
    sizes = args.sizes or [parse_size(s) for s in (QUICK_SIZES if args.quick else DEFAULT_SIZES)]
    if args.quick:
        args.target_s = min(args.target_s, 0.3)
    impls = [*args.impls, *(v.label for v in args.variant)]
    no_delay = delay_supported()
    report: dict[str, Any] = {"sizes": sizes, "impls": impls, "runs": []}
    failed = False
    for link_name in args.links:
        link = LINKS[link_name]
        if link.delay_ms and no_delay:
            print(f"\n### link {link.describe()}: not measured here ({no_delay})")
            report["runs"].append({"link": link_name, "skipped": no_delay})
            continue
        need = max(LAYOUTS[layout][0] for layout in args.layouts)
        with EmulatedHosts(need, link, tag="b") as hosts:
            agent = launch_agent(hosts, Path(f"/tmp/multihost-agent-{os.getpid()}.sh"))
            try:
                for layout in args.layouts:
                    placement = placement_of(layout)
                    results: dict[str, dict[int, dict[str, Any]]] = {}
                    for impl in impls:
                        started = time.monotonic()
                        if impl == "gloo":
                            job = run_gloo(hosts, placement, worker_argv(sizes, args, "gloo", impl), args.timeout)
                        elif impl == "mpi":
                            job = run_mpi(hosts, placement, worker_argv(sizes, args, "mpi", impl), agent,
                                          args.timeout)
                        else:
                            extra = next((v.env for v in args.variant if v.label == impl), {})
                            job = run_ours(hosts, placement, worker_argv(sizes, args, "ours", impl), extra,
                                           args.timeout)
                        results[impl] = cells(job, len(placement), sizes)
                        failed |= impl not in PEERS and any("error" in c for c in results[impl].values())
                        print(f"[{link_name} {layout} {impl}: {time.monotonic() - started:.0f}s]", file=sys.stderr)
                    print_table(link_name, link, layout, sizes, impls, results)
                    report["runs"].append({"link": link_name, "layout": layout,
                                           "results": {i: {str(n): c for n, c in r.items()}
                                                       for i, r in results.items()}})
            finally:
                agent.unlink(missing_ok=True)
    out_dir = BENCH_DIR / "results"
    out_dir.mkdir(exist_ok=True)
    out = out_dir / f"multihost-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(report, indent=1))
    print(f"\nraw data: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
