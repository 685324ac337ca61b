"""Elastic training benchmark, under the local elastic launcher (python -m collective.run --min-np ...):

    .venv/bin/python bench/elastic.py [--rounds 3] [--steps 40] [--ranks N[,N...]] [--recoveries 3] [--part all]
        [--width 1024] [--slots-per-host 8] [--recovery-steps 30]

1. Commit overhead: the same job (bench/_elastic_script.py, an MLP of 1.6M parameters, batch 32 per rank)
   without commits, committing every 10 steps and every step; step time = rank 0's median after warm-up,
   the median over --rounds interleaved rounds. Reported as a ratio to the run without commits. --ranks
   (default 2) on one emulated host.
2. Recovery: --ranks workers (default 3), the survivors on emulated hosts of --slots-per-host slots and the
   last rank alone on one more, SIGKILLed (by pid, here) after the step 12 it reports (last commit at 10);
   the breakdown from the kill to the launcher's "lost" line (detect), to its next "round" line (re-form
   published), to rank 0's re-join returning (mesh: its wait for the round and the new mesh), to the function
   resuming on rank 0 (sync: engine started, state broadcast), to its first step done; and, overlapping
   those, when rank 0's collective failed (noticed) and when it had torn the broken formation down. A small
   --width keeps the step from dominating at many ranks.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _step_runs import interleaved_medians, run_processes

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "_elastic_script.py"
CONFIGS = {"no-commit": 0, "commit/10": 10, "commit/1": 1}


def discovery_script(directory: str, hosts: str) -> str:
    path = os.path.join(directory, "discover.sh")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\necho '{hosts}'\n")
    os.chmod(path, 0o755)
    return path


def job_timeout_s(ranks: int) -> int:
    """The launcher's --timeout: many ranks on 2 cores take minutes to import torch."""
    return max(300, 40 * ranks)


def launcher(discovery: str, ranks: int, *script_args: str) -> list[str]:
    # The first formation's members wait for the last one to start, up to the elastic timeout.
    elastic_timeout_s, timeout_s = max(60, 6 * ranks), job_timeout_s(ranks)
    return [sys.executable, "-m", "collective.run", "--min-np", "2", "--max-np", str(ranks), "--host-discovery-script",
            discovery, "--elastic-timeout", str(elastic_timeout_s), "--timeout", str(timeout_s), str(SCRIPT),
            *script_args]


def commit_overhead(args: argparse.Namespace, directory: str, ranks: int) -> None:
    discovery = discovery_script(directory, f"hostA:{ranks}")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}

    def run_config(config: str) -> float:
        cmd = launcher(discovery, ranks, "--steps", str(args.steps), "--commit-every", str(CONFIGS[config]),
                       "--width", str(args.width))
        return run_processes(config, [(cmd, env)], "@@elastic_step ", expected=1, timeout_s=300)

    medians = interleaved_medians(list(CONFIGS), args.rounds, run_config)
    print("\n| configuration | step time (ms) | ratio to no-commit |")
    print("|---|---:|---:|")
    for config, median in medians.items():
        print(f"| {config} | {median * 1e3:.2f} | {median / medians['no-commit']:.3f} |")


VICTIM_STEP = 12  # the last rank dies after this step; the last commit was at step 10
# Recovery phases (name, the mark it ends at, the mark it starts from): consecutive, then their total.
PHASES = (("detect", "lost", "kill"), ("re-form", "round", "lost"), ("mesh", "join-end", "round"),
          ("sync", "resumed", "join-end"), ("first step", "first step", "resumed"), ("total", "first step", "kill"))
# Rank 0's own view, overlapping the phases above: its collective failing, and the broken formation torn down.
SIDE_MARKS = (("rank 0 noticed", "noticed", "kill"), ("rank 0 torn down", "join-start", "kill"))


def recovery_hosts(ranks: int, slots_per_host: int) -> str:
    """The discovery script's hosts: the survivors on hosts of ``slots_per_host`` slots, and the victim, the
    last rank, alone on a host of its own (its host is blacklisted when it dies, so no replacement comes)."""
    survivors = ranks - 1
    sizes = [min(slots_per_host, survivors - first) for first in range(0, survivors, slots_per_host)]
    return "\n".join(f"host{i}:{slots}" for i, slots in enumerate(sizes + [1]))


def recovery(args: argparse.Namespace, directory: str, ranks: int) -> dict[str, list[float]]:
    """``args.recoveries`` runs at ``ranks`` workers; returns each phase's seconds, one value per run."""
    discovery = discovery_script(directory, recovery_hosts(ranks, args.slots_per_host))
    phases: dict[str, list[float]] = {name: [] for name, _, _ in PHASES + SIDE_MARKS}
    for _ in range(args.recoveries):
        marks = _recovery_run(launcher(discovery, ranks, "--steps", str(args.recovery_steps), "--commit-every", "5",
                                       "--victim-step", str(VICTIM_STEP), "--width", str(args.width)), job_timeout_s(ranks))
        for name, end, begin in PHASES + SIDE_MARKS:
            phases[name].append(marks[end] - marks[begin])
        print(f"recovery at {ranks}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in phases.items()), flush=True)
    return phases


def _recovery_run(cmd: list[str], timeout_s: float) -> dict[str, float]:
    """One job whose last rank is SIGKILLed after its step VICTIM_STEP: the time of each mark (time.time())."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    lines: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_pump, args=(proc, lines), daemon=True).start()
    marks: dict[str, float] = {}
    tail: list[str] = []
    try:
        deadline = time.monotonic() + timeout_s + 60
        while "first step" not in marks:
            seen_at, line = lines.get(timeout=max(1.0, deadline - time.monotonic()))
            if line is None:
                raise RuntimeError(f"the recovery run ended early (exit {proc.wait()}) after {sorted(marks)}:\n"
                                   + "".join(tail))
            tail = (tail + [line])[-40:]
            if "@@elastic " in line:
                # "[host1:0]<stdout>:@@elastic victim PID TIME": the launcher's prefix comes first
                kind, *values = line.split("@@elastic ", 1)[1].split()
                if kind == "victim":
                    os.kill(int(values[0]), signal.SIGKILL)
                    marks["kill"] = time.time()
                elif kind == "first-step":
                    marks["first step"] = float(values[0])
                elif kind in ("noticed", "join-start", "join-end", "resumed"):
                    # the first noticed/join-start after the kill; the last join-end (a re-join may be retried)
                    if kind == "join-end" or kind not in marks:
                        marks[kind] = float(values[0])
            elif " lost: " in line and "kill" in marks:
                marks["lost"] = seen_at
            elif "round 2:" in line:
                marks["round"] = seen_at
        if proc.wait(timeout=max(1.0, deadline - time.monotonic())) != 0:
            print(f"recovery marks: {marks}", flush=True)  # measured, but the re-formed job did not finish
            raise RuntimeError(f"the recovery run failed with exit {proc.returncode} after its re-form")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return marks


def print_recovery_table(by_ranks: dict[int, dict[str, list[float]]]) -> None:
    sizes = list(by_ranks)
    print("\n| phase: median (range) seconds | " + " | ".join(f"{n} ranks" for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for name, _, _ in PHASES + SIDE_MARKS:
        cells = []
        for n in sizes:
            values = by_ranks[n][name]
            spread = f" ({min(values):.3f}-{max(values):.3f})" if len(values) > 1 else ""
            cells.append(f"{statistics.median(values):.3f}{spread}")
        print(f"| {name} | " + " | ".join(cells) + " |")


def _pump(proc: subprocess.Popen, lines: queue.SimpleQueue) -> None:
    for line in proc.stdout:
        lines.put((time.time(), line))
    lines.put((time.time(), None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--ranks", type=_sizes, default=None,
                        help="workers, a comma-separated list (default: 2 for the overhead, 3 for the recovery)")
    parser.add_argument("--recoveries", type=int, default=3)
    parser.add_argument("--recovery-steps", type=int, default=30)
    parser.add_argument("--slots-per-host", type=int, default=8, help="emulated host size in the recovery runs")
    parser.add_argument("--width", type=int, default=1024, help="the MLP's hidden width (1024: 1.6M parameters)")
    parser.add_argument("--part", choices=("all", "overhead", "recovery"), default="all")
    args = parser.parse_args()
    if args.part != "overhead" and args.ranks and min(args.ranks) < 3:
        parser.error("a recovery needs at least 3 workers: 2 survive it (--min-np 2)")
    if args.recovery_steps <= VICTIM_STEP:
        parser.error(f"--recovery-steps must go past the step the victim dies after ({VICTIM_STEP})")
    with tempfile.TemporaryDirectory() as directory:
        if args.part in ("all", "overhead"):
            for ranks in args.ranks or [2]:
                commit_overhead(args, directory, ranks)
        if args.part in ("all", "recovery"):
            print_recovery_table({ranks: recovery(args, directory, ranks) for ranks in args.ranks or [3]})


def _sizes(text: str) -> list[int]:
    sizes = [int(part) for part in text.split(",")]
    if any(size < 2 for size in sizes):
        raise argparse.ArgumentTypeError("the jobs need at least 2 workers (--min-np 2)")
    return sizes


if __name__ == "__main__":
    main()
