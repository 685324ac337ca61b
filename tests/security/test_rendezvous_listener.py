"""A hostile peer against the launcher's rendezvous while a real `python -m collective.run -np 2` job meets
through it."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from watched_process import Attacker, WatchedProcess, assert_all_refused

pytestmark = pytest.mark.timeout(300)

GATED_JOB = str(Path(__file__).resolve().parent / "scripts" / "gated_job.py")
JOB_TIMEOUT_S = 120


def _timed_job(tmp_path: Path, attack: bool) -> tuple[float, WatchedProcess, dict | None]:
    """Runs the gated job; with ``attack``, the attack is up before the ranks meet. Returns the seconds from the
    gate opening to the launcher's exit, the launcher (exited), and the attacker's summary."""
    gate = tmp_path / f"gate-{'attacked' if attack else 'plain'}"
    os.mkfifo(gate)
    # Read-write, so opening it never blocks either side; the ranks block on read() until the test writes.
    gate_fd = os.open(gate, os.O_RDWR)
    attacker: Attacker | None = None
    argv = [sys.executable, "-m", "collective.run", "-np", "2", "--timeout", str(JOB_TIMEOUT_S), GATED_JOB, str(gate)]
    try:
        with WatchedProcess(argv, env={**os.environ, "PYTHONUNBUFFERED": "1"}) as launcher:
            address, secret_hex = launcher.expect("RENDEZVOUS", 60).split("RENDEZVOUS ", 1)[1].split()
            assert address.startswith("127.0.0.1:"), address  # the local launcher stays on loopback
            if attack:
                attacker = Attacker("rendezvous", address, bytes.fromhex(secret_hex))
            started = time.monotonic()
            os.write(gate_fd, b"go")  # one byte per rank
            code = launcher.wait(JOB_TIMEOUT_S + 30)
            elapsed = time.monotonic() - started
            summary = attacker.finish() if attacker is not None else None
            assert code == 0, "\n".join(launcher.lines[-40:])
            assert sum("RESULT 1.0" in line for line in launcher.lines) == 2, launcher.lines
            return elapsed, launcher, summary
    finally:
        if attacker is not None:
            attacker.kill()
        os.close(gate_fd)


def test_a_launcher_job_meets_finishes_and_returns_on_time_under_attack(tmp_path: Path) -> None:
    plain_s, _, _ = _timed_job(tmp_path, attack=False)
    attacked_s, _, summary = _timed_job(tmp_path, attack=True)
    assert summary is not None
    print(f"rendezvous: unattacked {plain_s:.2f}s, attacked {attacked_s:.2f}s "
          f"(ratio {attacked_s / plain_s:.2f}); attack: {summary}")
    assert attacked_s < 3 * plain_s + 5, (plain_s, attacked_s, summary)
    assert_all_refused(summary, idle=1200)
