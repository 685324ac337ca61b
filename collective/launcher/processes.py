"""Launcher and Spark task: a launcher's child process, supervised the one way both launchers need it.

``collective.run`` starts one per rank; under ``spark_hvd.run`` each task starts one for its rank's fn.
Either way the child leads its own process group (teardown signals reach its own children too, and a ^C
in the terminal reaches the launcher only, which then stops the children in order), gets SIGKILL when
the thread that started it dies (PR_SET_PDEATHSIG), and has its stdout and stderr pumped line by line.

This module must stay importable without the C++ extension: it only starts processes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from typing import BinaryIO, Callable, Mapping, Sequence

_LINE_LIMIT = 1 << 16
_PR_SET_PDEATHSIG = 1


class ChildProcess:
    """Starts ``argv`` as a supervised child. ``on_line(stream, chunk)`` gets each line as bytes, the
    newline kept (a last line may lack one), from a pump thread per stream.

    Create it from the thread that lives as long as the child should: the child dies with that thread.
    """

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], on_line: Callable[[str, bytes], None],
                 *, pass_fds: Sequence[int] = (), name: str = "child", stdin_line: bytes | None = None) -> None:
        # stdin_line: written to the child's stdin, which then stays open for the child's lifetime (a remote
        # rank's ssh reads its request from it, and takes its closing as the signal to stop the rank).
        self.proc = subprocess.Popen(
            list(argv), env=dict(env), stdin=subprocess.DEVNULL if stdin_line is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, pass_fds=tuple(pass_fds), preexec_fn=child_setup_for(os.getpid()),
            close_fds=True)
        if stdin_line is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(stdin_line)
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass  # it died at once; its exit code and stderr tell why
        self._pumps = start_line_pumps((self.proc.stdout, self.proc.stderr), on_line, name)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal_group(self, signum: int) -> None:
        """Signals the child's whole group; its pid names the group, which outlives it while grandchildren
        remain (what a SIGKILL here cleans up)."""
        try:
            os.killpg(self.proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def drain_output(self, deadline: float) -> None:
        """Waits (until the monotonic ``deadline``) for the pumps to reach EOF. A grandchild that inherited
        a pipe can hold it open forever; its output is not worth hanging the launcher."""
        for pump in self._pumps:
            pump.join(max(0.0, deadline - time.monotonic()))


def describe_exit(returncode: int) -> str:
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = "unknown signal"
    return f"killed by signal {name} ({-returncode})"


def child_setup_for(launcher_pid: int) -> Callable[[], None]:
    """Builds the preexec_fn; libc is resolved here because the child must not import or load."""
    prctl = _load_prctl()

    def setup() -> None:
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            # If the launcher died before prctl ran, the signal will never come; exit now.
            if os.getppid() != launcher_pid:
                os._exit(1)

    return setup


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def start_line_pumps(pipes: tuple[BinaryIO, BinaryIO], on_line: Callable[[str, bytes], None],
                     name: str) -> list[threading.Thread]:
    """Daemon threads that pass each line of a child's (stdout, stderr) to on_line until EOF, then close it."""
    pumps = [threading.Thread(target=_pump_lines, args=(pipe, stream, on_line), name=f"{name}-{stream}",
                              daemon=True)
             for pipe, stream in zip(pipes, ("stdout", "stderr"))]
    for pump in pumps:
        pump.start()
    return pumps


def _pump_lines(pipe: BinaryIO, stream: str, on_line: Callable[[str, bytes], None]) -> None:
    try:
        # Blocking reads end at EOF, when the child and anything inheriting the pipe exit.
        for chunk in iter(lambda: pipe.readline(_LINE_LIMIT), b""):
            on_line(stream, chunk)
    finally:
        pipe.close()
