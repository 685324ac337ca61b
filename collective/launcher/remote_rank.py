"""Rank host, under ssh: ``python -m collective.launcher.remote_rank`` starts one rank that ``collective.run -H`` placed here.

It reads one JSON line from stdin (argv, env, cwd: see ``collective.launcher.hosts.remote_rank_request``), so the
job's secret never appears on a command line; starts the rank in a process group of its own, with its
output going straight back over ssh; and exits with the rank's exit code. When stdin closes (the launcher
killed its ssh, or the connection dropped) it stops the rank's whole group: SIGTERM, then SIGKILL after a
grace period, so no rank outlives its job on a remote host.

This module must stay importable without the C++ extension: it only starts processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

_TERM_GRACE_S = 5.0


def main() -> int:
    request = json.loads(_read_line(0) or b"null")
    if not isinstance(request, dict) or not {"argv", "env", "cwd"} <= request.keys():
        print("collective.launcher.remote_rank: expected one JSON line with argv, env and cwd on stdin", file=sys.stderr)
        return 2
    try:
        rank = subprocess.Popen(request["argv"], env=request["env"], cwd=request["cwd"], stdin=subprocess.DEVNULL,
                                start_new_session=True)
    except OSError as e:
        print(f"collective.launcher.remote_rank: cannot start {request['argv'][:2]} in {request['cwd']}: {e}", file=sys.stderr)
        return 127
    threading.Thread(target=_stop_when_stdin_closes, args=(rank,), daemon=True).start()
    code = rank.wait()
    _signal_group(rank, signal.SIGKILL)  # whatever the rank left behind in its group goes with it
    return code if code >= 0 else 128 - code


def _read_line(fd: int) -> bytes:
    """One line from ``fd``, read unbuffered so that nothing after it is swallowed, and so that no Python
    buffer lock is held by the watcher thread when the interpreter exits."""
    line = bytearray()
    while not line.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    return bytes(line)


def _stop_when_stdin_closes(rank: subprocess.Popen) -> None:
    while os.read(0, 4096):
        pass
    _signal_group(rank, signal.SIGTERM)
    try:
        rank.wait(timeout=_TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(rank, signal.SIGKILL)


def _signal_group(rank: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(rank.pid, signum)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the watcher thread may still block in read(); the rank is gone, so nothing is lost
