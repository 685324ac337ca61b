"""Runs an elastic job under ``python -m collective.run --min-np ...`` for the tests: its output is read
line by line as it comes, so a test can act at a point the job reports; always with a deadline, and the
launcher's whole process group is killed at the end."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def write_discovery(directory: Path, hosts: list[str]) -> tuple[Path, Path]:
    """A discovery script that prints the hosts file, and the file (rewrite it to change the hosts)."""
    hosts_file = directory / "hosts.txt"
    hosts_file.write_text("".join(f"{h}\n" for h in hosts))
    script = directory / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat '{hosts_file}'\n")
    script.chmod(0o755)
    return script, hosts_file


class ElasticJob:
    def __init__(self, script: str, discovery: Path, *script_args: str, min_np: int, max_np: int,
                 elastic_timeout_s: float = 60.0, timeout_s: float = 150.0, leading_python: bool = False) -> None:
        """``leading_python``: the command as horovodrun takes it, ``... python script.py args``."""
        cmd = [sys.executable, "-m", "collective.run", "--min-np", str(min_np), "--max-np", str(max_np),
               "--host-discovery-script", str(discovery), "--elastic-timeout", str(elastic_timeout_s),
               "--timeout", str(timeout_s), *(["python"] if leading_python else []), str(SCRIPTS / script),
               *script_args]
        self.deadline = time.monotonic() + timeout_s + 30  # the launcher's own --timeout fires first
        self.lines: list[str] = []
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first line (from now on) matching ``pattern``; fails at the deadline or when the job ends."""
        regex = re.compile(pattern)
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no line matching {pattern!r} in time:\n" + "\n".join(self.lines))
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"the job ended without a line matching {pattern!r}:\n" + "\n".join(self.lines))
            self.lines.append(line)
            match = regex.search(line)
            if match:
                return match

    def finish(self) -> tuple[int, str]:
        """Waits for the job to end; its exit code and whole output."""
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError("the elastic job did not end in time:\n" + "\n".join(self.lines))
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
        return self.proc.wait(timeout=max(1.0, self.deadline - time.monotonic())), "\n".join(self.lines)

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def __enter__(self) -> "ElasticJob":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
