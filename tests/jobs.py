"""Runs real multi-process jobs for the tests, always with a deadline and always cleaned up."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from collective.bootstrap import RendezvousServer
from collective.config import env_for_rank, format_host_port

WORKERS = Path(__file__).resolve().parent / "workers"
RESULT_TAG = "RESULT "
# The launcher's prefix (Horovod's), or the "[rank]: " of ranks started without it (tests/multihost, mpi).
_RESULT_LINE = re.compile(r"^\[(\d+)\](?:<stdout>:|: )" + RESULT_TAG + r"(.*)$")


@dataclass
class JobResult:
    returncode: int
    output: str
    results: dict[int, list[dict]] = field(default_factory=dict)  # rank -> JSON records it printed

    def records(self, rank: int) -> list[dict]:
        return self.results.get(rank, [])


def parse_results(output: str) -> dict[int, list[dict]]:
    """Collects the `[rank]<stdout>:RESULT {...}` lines that workers print through the launcher (or the
    `[rank]: RESULT {...}` lines of ranks a test started and prefixed itself)."""
    results: dict[int, list[dict]] = {}
    for line in output.splitlines():
        found = _RESULT_LINE.match(line)
        if found:
            results.setdefault(int(found.group(1)), []).append(json.loads(found.group(2)))
    return results


def run_job(worker: str, num_proc: int, *args: str, env: dict[str, str] | None = None,
            timeout_s: float = 120.0) -> JobResult:
    """Runs tests/workers/<worker> on num_proc ranks through `python -m collective.run`."""
    cmd = [sys.executable, "-m", "collective.run", "-np", str(num_proc), "--timeout", str(timeout_s),
           str(WORKERS / worker), *args]
    full_env = {**os.environ, **(env or {})}
    # The launcher's own --timeout fires first; this outer one only guards against a stuck launcher,
    # whose ranks then die with it (they are bound to it by PR_SET_PDEATHSIG).
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout_s + 30)
    output = proc.stdout + proc.stderr
    return JobResult(proc.returncode, output, parse_results(proc.stdout))


class ManualJob:
    """Ranks started directly (no launcher), so a test can kill one and watch how the others react."""

    def __init__(self, worker: str, num_proc: int, *args: str, env: dict[str, str] | None = None) -> None:
        self.server = RendezvousServer()
        self.server.start()
        host, port = self.server.address
        secret = secrets.token_bytes(32)
        self.procs: list[subprocess.Popen[str]] = []
        for rank in range(num_proc):
            rank_env = {**os.environ, **(env or {}),
                        **env_for_rank(rank, num_proc, format_host_port(host, port), secret),
                        "PYTHONUNBUFFERED": "1"}
            self.procs.append(subprocess.Popen(
                [sys.executable, str(WORKERS / worker), *args], env=rank_env, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True))

    def lines(self, rank: int) -> Iterator[str]:
        stream = self.procs[rank].stdout
        assert stream is not None
        for line in stream:
            yield line.rstrip("\n")

    def wait_for_line(self, rank: int, marker: str) -> None:
        for line in self.lines(rank):
            if marker in line:
                return
        raise AssertionError(f"rank {rank} exited before printing {marker!r}")

    def kill(self, rank: int) -> None:
        os.kill(self.procs[rank].pid, signal.SIGKILL)

    def finish(self, rank: int, timeout_s: float) -> tuple[int, str]:
        """Waits for one rank to exit; returns its exit code and remaining output."""
        out, _ = self.procs[rank].communicate(timeout=timeout_s)
        return self.procs[rank].returncode, out or ""

    def first_report(self, rank: int, timeout_s: float) -> dict:
        """Waits for one rank to exit; returns the first RESULT record it printed (fails naming the rank and
        its output if it printed none)."""
        code, out = self.finish(rank, timeout_s)
        records = [json.loads(line[len(RESULT_TAG):]) for line in out.splitlines() if line.startswith(RESULT_TAG)]
        assert records, f"rank {rank} reported nothing (exit {code}):\n{out[-3000:]}"
        return records[0]

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            if proc.stdout:
                proc.stdout.close()
        self.server.stop()

    def __enter__(self) -> "ManualJob":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
