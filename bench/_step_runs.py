"""The driver side shared by the step-time benchmarks (torch_step.py, keras_step.py): start one
configuration's processes, read each rank's median step time, interleave rounds, print the table."""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
from typing import Callable, Sequence


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(config: str, commands: Sequence[tuple[list[str], dict[str, str]]], marker: str, expected: int,
                  timeout_s: float, tolerated_returncodes: Sequence[int] = ()) -> float:
    """Runs the commands side by side; returns the max over ranks of their reported median step time.

    Each rank prints ``marker + {"median_s": ...}``; a non-zero exit (other than a tolerated one) fails."""
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for cmd, env in commands]
    medians, outputs = [], []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout_s)
            outputs.append(out)
            medians += [json.loads(line.split(marker, 1)[1])["median_s"] for line in out.splitlines() if marker in line]
            if proc.returncode != 0 and proc.returncode not in tolerated_returncodes:
                raise RuntimeError(f"{config} failed (exit {proc.returncode}):\n{out[-3000:]}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if len(medians) != expected:
        raise RuntimeError(f"{config}: {len(medians)} of {expected} ranks reported:\n" + "\n".join(outputs)[-3000:])
    return max(medians)


def interleaved_medians(configs: Sequence[str], rounds: int, run_config: Callable[[str], float]) -> dict[str, float]:
    """Runs every configuration once a round, the order rotated each round so that none always runs
    first or right after another; prints each round; returns the median step time per configuration."""
    samples: dict[str, list[float]] = {c: [] for c in configs}
    for round_index in range(rounds):
        shift = round_index % len(configs)
        for config in list(configs[shift:]) + list(configs[:shift]):
            samples[config].append(run_config(config))
        print(f"round {round_index + 1}: " + ", ".join(f"{c} {samples[c][-1] * 1e3:.1f} ms" for c in configs),
              flush=True)
    return {c: statistics.median(v) for c, v in samples.items()}


def print_step_table(configs: Sequence[str], step: dict[str, float]) -> None:
    print("\n| configuration | step time (ms) | communication overhead (ms) |")
    print("|---|---:|---:|")
    for config in configs:
        overhead = "" if config.startswith("single") else f"{(step[config] - step['single']) * 1e3:.1f}"
        print(f"| {config} | {step[config] * 1e3:.1f} | {overhead} |")
