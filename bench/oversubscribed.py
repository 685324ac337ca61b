"""Allreduce latency and CPU on an oversubscribed host (many more ranks than cores), under each waiting policy.

    .venv/bin/python bench/oversubscribed.py [--ranks 16 32 64 128] [--sizes 8 64K 1M]
                                             [--policies auto:0 auto:200 auto:2000 auto:10000 20:2000]
                                             [--rounds 2]

A waiting policy is ``spin_us:yield_us`` (Config.spin_us / yield_us; ``auto`` is spin_us=-1, which spins
20 us only where every local rank has a core, so none here). A rank that finds nothing to move busy-waits
spin_us, then yields its core (sched_yield) for yield_us, then sleeps in a futex or poll() until data comes.

One job per rank count (``collective.run``); inside it every rank joins the job once per policy
(``init(spin_us=..., yield_us=...)``), in forward then reverse order over --rounds rounds, so that the
machine's drift falls on every policy alike. For each policy and size, every rank times each of a fixed
number of in-place float32 SUM allreduces, and reads its process's CPU time (getrusage) and context
switches around the loop. Reported per cell:
  - latency: the max over ranks of each rank's median per-call time (the slowest rank bounds a step);
  - CPU per call: summed over all ranks, against the wall time per call times the host's cores (busy %);
  - involuntary context switches per call per rank (the scheduler taking the core away).
Ratios are against the default policy (auto:2000), measured in the same job.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

MARKER = "@@oversubscribed "
DEFAULT_POLICY = "auto:2000"
# Calls timed per size: enough for a median, few enough that 128 ranks on 2 cores finish in seconds.
ITERATIONS = {8: 100, 64 << 10: 40, 1 << 20: 12}
_UNITS = {"K": 1 << 10, "M": 1 << 20}


def parse_size(text: str) -> int:
    return int(text[:-1]) * _UNITS[text[-1]] if text[-1] in _UNITS else int(text)


def show_size(nbytes: int) -> str:
    for suffix, unit in (("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit} {suffix}iB"
    return f"{nbytes} B"


def parse_policy(text: str) -> tuple[int, int]:
    spin, yield_us = text.split(":")
    return (-1 if spin == "auto" else int(spin)), int(yield_us)


def iterations_for(nbytes: int) -> int:
    return ITERATIONS.get(nbytes) or max(5, min(100, (16 << 20) // max(nbytes, 1)))


def timed_loop(hvd: object, nbytes: int) -> dict[str, float]:
    import numpy as np

    buf = np.ones(max(nbytes // 4, 1), np.float32)
    for _ in range(3):
        hvd.allreduce_(buf, op=hvd.Sum)
    hvd.barrier()
    times = []
    before, wall_start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(iterations_for(nbytes)):
        start = time.perf_counter()
        hvd.allreduce_(buf, op=hvd.Sum)
        times.append(time.perf_counter() - start)
    wall = time.perf_counter() - wall_start
    after = resource.getrusage(resource.RUSAGE_SELF)
    calls = len(times)
    return {"median_s": statistics.median(times), "p90_s": sorted(times)[int(0.9 * (calls - 1))],
            "wall_per_call_s": wall / calls,
            "cpu_per_call_s": (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / calls,
            "nivcsw_per_call": (after.ru_nivcsw - before.ru_nivcsw) / calls,
            "nvcsw_per_call": (after.ru_nvcsw - before.ru_nvcsw) / calls}


def rank_main(policies: list[str], sizes: list[int], rounds: int) -> None:
    import collective as hvd

    order = [p for r in range(rounds) for p in (policies if r % 2 == 0 else policies[::-1])]
    for index, policy in enumerate(order):
        spin_us, yield_us = parse_policy(policy)
        if index:
            hvd.shutdown()
        hvd.init(spin_us=spin_us, yield_us=yield_us, timeout_s=600, connect_timeout_s=600)
        for nbytes in sizes:
            record = {"policy": policy, "bytes": nbytes, "rank": hvd.rank(), "size": hvd.size(),
                      **timed_loop(hvd, nbytes)}
            print(MARKER + json.dumps(record), flush=True)
    hvd.shutdown()


def one_job(ranks: int, args: argparse.Namespace) -> list[dict]:
    cmd = [sys.executable, "-m", "collective.run", "-np", str(ranks), "--timeout", str(args.job_timeout_s),
           str(Path(__file__).resolve()), "--role", "rank", "--policies", *args.policies,
           "--sizes", *[str(s) for s in args.sizes], "--rounds", str(args.rounds)]
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.job_timeout_s + 60,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    records = [json.loads(line.split(MARKER, 1)[1]) for line in out.stdout.splitlines() if MARKER in line]
    if out.returncode != 0:
        # The launcher's --timeout ends a job that ran long; what it measured until then still counts.
        print(f"{ranks} ranks exited {out.returncode} after {len(records)} records:\n"
              f"{(out.stdout + out.stderr)[-1500:]}", flush=True)
    print(f"{ranks} ranks: job {time.monotonic() - started:.0f} s, 1-min load average "
          f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after", flush=True)
    return records


def summarise(records: list[dict], policy: str, nbytes: int) -> dict[str, float] | None:
    """One cell of the table; None where the job ended before measuring it."""
    cell = [r for r in records if r["policy"] == policy and r["bytes"] == nbytes]
    if not cell:
        return None
    per_round: dict[int, list[dict]] = {}
    for r in cell:
        per_round.setdefault(r["rank"], []).append(r)
    # Per rank: the median over rounds; then the slowest rank's latency, the ranks' total CPU.
    median = lambda rows, key: statistics.median(row[key] for row in rows)  # noqa: E731
    latency = max(median(rows, "median_s") for rows in per_round.values())
    wall = max(median(rows, "wall_per_call_s") for rows in per_round.values())
    cpu = sum(median(rows, "cpu_per_call_s") for rows in per_round.values())
    return {"latency_ms": latency * 1e3, "p90_ms": max(median(rows, "p90_s") for rows in per_round.values()) * 1e3,
            "cpu_ms": cpu * 1e3, "busy": cpu / (wall * (os.cpu_count() or 1)),
            "nivcsw": statistics.mean(median(rows, "nivcsw_per_call") for rows in per_round.values()),
            "nvcsw": statistics.mean(median(rows, "nvcsw_per_call") for rows in per_round.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--sizes", nargs="+", default=["8", "64K", "1M"])
    parser.add_argument("--policies", nargs="+",
                        default=["auto:0", "auto:200", DEFAULT_POLICY, "auto:10000", "20:2000"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--job-timeout-s", type=int, default=900)
    parser.add_argument("--role", choices=["rank"], default=None)
    args = parser.parse_args()
    args.sizes = [parse_size(s) if isinstance(s, str) else s for s in args.sizes]
    if args.role == "rank":
        rank_main(args.policies, args.sizes, args.rounds)
        return
    print(f"{os.cpu_count()} cores; policies spin_us:yield_us {args.policies}; {args.rounds} rounds", flush=True)
    rows = []
    for ranks in args.ranks:
        records = one_job(ranks, args)
        for nbytes in args.sizes:
            default = summarise(records, DEFAULT_POLICY, nbytes)
            for policy in args.policies:
                cell = summarise(records, policy, nbytes)
                if cell is None:
                    continue
                ratio = cell["latency_ms"] / default["latency_ms"] if default else float("nan")
                rows.append((ranks, show_size(nbytes), policy, cell, ratio))
                print(MARKER + json.dumps({"ranks": ranks, "bytes": nbytes, "policy": policy, **cell}), flush=True)
    print("\n| ranks | size | spin:yield (us) | median latency (ms) | p90 (ms) | vs auto:2000 | CPU per call, "
          "all ranks (ms) | cores busy | involuntary / voluntary switches per call per rank |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for ranks, size, policy, cell, ratio in rows:
        print(f"| {ranks} | {size} | {policy} | {cell['latency_ms']:.2f} | {cell['p90_ms']:.2f} | {ratio:.2f} | "
              f"{cell['cpu_ms']:.1f} | {cell['busy']:.0%} | {cell['nivcsw']:.1f} / {cell['nvcsw']:.1f} |")


if __name__ == "__main__":
    main()
