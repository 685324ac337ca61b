"""A child process of a security test whose output lines the test waits on, always with a deadline, and which is
always killed (its whole process group) when the test ends."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

HOSTILE_PEERS = Path(__file__).resolve().parent / "hostile_peers.py"


class WatchedProcess:
    """Popen with its merged output read by a thread: ``expect(prefix)`` returns the first line after the last
    one seen that starts with ``prefix``; ``lines`` keeps everything read."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: list[str] = []
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def expect(self, marker: str, timeout_s: float) -> str:
        """The next line containing ``marker``; AssertionError (with the output) at EOF or the deadline."""
        while True:
            try:
                line = self._queue.get(timeout=timeout_s)
            except queue.Empty:
                raise AssertionError(f"no {marker!r} line within {timeout_s:g}s; output:\n"
                                     + "\n".join(self.lines[-50:])) from None
            if line is None:
                raise AssertionError(f"exited before a {marker!r} line; output:\n" + "\n".join(self.lines[-50:]))
            self.lines.append(line)
            if marker in line:
                return line

    def wait(self, timeout_s: float) -> int:
        code = self.proc.wait(timeout=timeout_s)
        self._reader.join(timeout_s)
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                return code
            if line is not None:
                self.lines.append(line)

    def close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)
        self.close_stdin()

    def __enter__(self) -> "WatchedProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


class Attacker(WatchedProcess):
    """hostile_peers.py in a process of its own, aimed at one listener; ``finish()`` returns its summary."""

    def __init__(self, protocol: str, address: str, secret: bytes | None = None, idle: int = 1200) -> None:
        argv = [sys.executable, str(HOSTILE_PEERS), protocol, address, "--idle", str(idle)]
        if secret is not None:
            argv.append(secret.hex())
        super().__init__(argv, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.idle = idle
        self.ready = json.loads(self.expect("READY", 60).split(" ", 1)[1])
        self.expect("ROUND 1", 60)  # every kind has hit the listener once before the job goes on

    def finish(self, timeout_s: float = 60) -> dict[str, Any]:
        self.close_stdin()
        summary = json.loads(self.expect("DONE", timeout_s).split(" ", 1)[1])
        self.wait(timeout_s)
        return summary


def assert_all_refused(summary: dict[str, Any], idle: int) -> None:
    """The flood was up, every hostile kind was tried, and the server closed each one promptly without letting
    it in."""
    assert summary["idle_opened"] >= idle, summary
    for kind, outcomes in summary["actions"].items():
        assert outcomes.get("refused", 0) >= 1, f"the attack never tried {kind} on the live server: {summary}"
        # Unreachable: tried after the job had ended and its listener closed.
        assert set(outcomes) <= {"refused", "unreachable"}, f"{kind} connections were not all refused: {summary}"
