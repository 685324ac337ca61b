"""Elastic training benchmark, under the local elastic launcher (python -m collective.run --min-np ...):

    .venv/bin/python bench/elastic.py [--rounds 3] [--steps 40] [--ranks 2] [--recoveries 3] [--part all]

1. Commit overhead: the same job (bench/_elastic_script.py, an MLP of 1.6M parameters, batch 32 per rank)
   without commits, committing every 10 steps and every step; step time = rank 0's median after warm-up,
   the median over --rounds interleaved rounds. Reported as a ratio to the run without commits.
2. Recovery: 3 workers, the last one SIGKILLed (by pid, here) after the step it reports; the breakdown from
   the kill to the launcher's "lost" line (detection), to its next "round" line (re-form published), to the
   function resuming on rank 0 (mesh rebuilt, state restored and synced), to its first step done.
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


def launcher(discovery: str, ranks: int, *script_args: str) -> list[str]:
    return [sys.executable, "-m", "collective.run", "--min-np", "2", "--max-np", str(ranks), "--host-discovery-script",
            discovery, "--elastic-timeout", "60", "--timeout", "300", str(SCRIPT), *script_args]


def commit_overhead(args: argparse.Namespace, directory: str) -> None:
    discovery = discovery_script(directory, f"hostA:{args.ranks}")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}

    def run_config(config: str) -> float:
        cmd = launcher(discovery, args.ranks, "--steps", str(args.steps), "--commit-every", str(CONFIGS[config]))
        return run_processes(config, [(cmd, env)], "@@elastic_step ", expected=1, timeout_s=300)

    medians = interleaved_medians(list(CONFIGS), args.rounds, run_config)
    print("\n| configuration | step time (ms) | ratio to no-commit |")
    print("|---|---:|---:|")
    for config, median in medians.items():
        print(f"| {config} | {median * 1e3:.2f} | {median / medians['no-commit']:.3f} |")


def recovery(args: argparse.Namespace, directory: str) -> None:
    discovery = discovery_script(directory, "hostA:2\nhostB:1")
    phases: dict[str, list[float]] = {"detect": [], "re-form": [], "resume": [], "first step": [], "total": []}
    for _ in range(args.recoveries):
        cmd = launcher(discovery, 3, "--steps", "30", "--commit-every", "5", "--victim-step", "12")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
        lines: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=_pump, args=(proc, lines), daemon=True).start()
        marks: dict[str, float] = {}
        try:
            deadline = time.monotonic() + 300
            while "first step" not in marks:
                seen_at, line = lines.get(timeout=max(1.0, deadline - time.monotonic()))
                if line is None:
                    raise RuntimeError(f"the recovery run ended early (exit {proc.wait()}) after {sorted(marks)}")
                if "@@elastic victim" in line:
                    os.kill(int(line.split()[3]), signal.SIGKILL)
                    marks["kill"] = time.time()
                elif " lost: " in line and "kill" in marks:
                    marks["lost"] = seen_at
                elif "round 2:" in line:
                    marks["round"] = seen_at
                elif "@@elastic resumed" in line:
                    marks["resumed"] = float(line.split()[3])
                elif "@@elastic first-step" in line:
                    marks["first step"] = float(line.split()[3])
            if proc.wait(timeout=120) != 0:
                raise RuntimeError(f"the recovery run failed with exit {proc.returncode}")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        phases["detect"].append(marks["lost"] - marks["kill"])
        phases["re-form"].append(marks["round"] - marks["lost"])
        phases["resume"].append(marks["resumed"] - marks["round"])
        phases["first step"].append(marks["first step"] - marks["resumed"])
        phases["total"].append(marks["first step"] - marks["kill"])
        print("recovery: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in phases.items()), flush=True)
    print("\n| phase (median over runs) | seconds |")
    print("|---|---:|")
    for phase, values in phases.items():
        print(f"| {phase} | {statistics.median(values):.3f} |")


def _pump(proc: subprocess.Popen, lines: queue.SimpleQueue) -> None:
    for line in proc.stdout:
        lines.put((time.time(), line))
    lines.put((time.time(), None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--recoveries", type=int, default=3)
    parser.add_argument("--part", choices=("all", "overhead", "recovery"), default="all")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        if args.part in ("all", "overhead"):
            commit_overhead(args, directory)
        if args.part in ("all", "recovery"):
            recovery(args, directory)


if __name__ == "__main__":
    main()
