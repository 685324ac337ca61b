"""Zygote: a spare rank child that has imported its modules forks a fresh rank process per job.

Importing torch with dynamo takes seconds; a spare started after one fit is often still importing when the
next fit launches. A zygote imports once and then, per job, ``os.fork()``s a child that takes the path an
adopted spare takes (child_main: the task's environment, fn, the job). The zygote itself never runs user
code, never joins a collective job and never runs a framework op: every job still gets a process that has
run nothing before, and nothing of an earlier job's process survives (each child exits after its job).

Forking a process with threads copies their locks but not the threads; so the zygote forks only when it
is alone, apart from threads known to survive a fork: OpenBLAS's pool (numpy), which we stop here as its
own fork handler would, and jemalloc's background purger (pyarrow), which jemalloc's fork handler turns
off in the child. With any other thread, or with the GPU driver opened by the imports, it stays a plain
spare. (TensorFlow 2.21 starts no thread of its own at import: its pools start at the first op.)

Control socket (AF_UNIX, SOCK_SEQPACKET, one JSON message each), zygote and task:
  zygote -> task  {"forkable": bool, "threads": [names]}        once, after the imports
  task -> zygote  b"fork" + SCM_RIGHTS [launch_read, result_write, stdout_write, stderr_write]
  zygote -> task  {"pid": N} or {"error": "..."}
  zygote -> task  {"exited": N, "returncode": rc}                when it has reaped child N
The zygote exits when the task closes its end, or after ``idle_s`` with no child and no request.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import socket
import sys
import time
from typing import Any

from collective.launcher.processes import child_setup_for

# Threads whose library makes a fork safe by itself (jemalloc: background threads are off in the child).
_FORK_SAFE_THREADS = frozenset({"jemalloc_bg_thd"})
_FDS_PER_FORK = 4
_MESSAGE_BYTES = 4096


def serve(control: socket.socket, idle_s: float) -> tuple[int, int] | None:
    """Tells the task whether this process can fork, then serves fork requests.

    Returns only in two cases: ``None`` at once when it cannot fork (the caller goes on as a plain spare),
    or ``(launch_fd, result_fd)`` in a forked child, which then reads its job as an adopted spare does.
    The zygote itself ends in here; a child closes the zygote's own pipes to its task (the caller's files).
    """
    _stop_blas_threads()
    threads = _other_threads()
    forkable = (hasattr(os, "pidfd_open") and not [t for t in threads if t not in _FORK_SAFE_THREADS]
                and not _gpu_driver_open())
    _send(control, {"forkable": forkable, "threads": threads})
    if not forkable:
        control.close()
        return None
    children: dict[int, int] = {}      # pidfd -> pid of a forked child not reaped yet
    idle_since = time.monotonic()
    while True:
        timeout = None if children else max(0.0, idle_s - (time.monotonic() - idle_since))
        ready = select.select([control, *children], [], [], timeout)[0]
        if not ready:
            os._exit(0)                 # nobody asked for a child within the idle limit
        for pidfd in [fd for fd in ready if fd in children]:
            pid = children.pop(pidfd)
            os.close(pidfd)
            _, status = os.waitpid(pid, 0)
            _send(control, {"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})
            idle_since = time.monotonic()
        if control in ready:
            try:
                message, fds, _, _ = socket.recv_fds(control, _MESSAGE_BYTES, _FDS_PER_FORK)
            except OSError:
                os._exit(0)
            if not message:
                os._exit(0)             # the task retired us; a running child dies with us (PDEATHSIG)
            if len(fds) != _FDS_PER_FORK:
                _close_all(fds)
                _send(control, {"error": f"a fork request needs {_FDS_PER_FORK} descriptors, got {len(fds)}"})
                continue
            zygote_pid = os.getpid()
            pid = os.fork()
            if pid == 0:
                return _become_rank_process(zygote_pid, control, fds, tuple(children))
            _close_all(fds)
            children[os.pidfd_open(pid)] = pid
            _send(control, {"pid": pid})


def _become_rank_process(zygote_pid: int, control: socket.socket, fds: list[int],
                         inherited: tuple[int, ...]) -> tuple[int, int]:
    # As a spawned rank child: leader of its own group (the task kills the group), SIGKILLed when its parent,
    # the zygote, dies (the zygote dies with the worker); exits at once if the zygote is already gone.
    child_setup_for(zygote_pid)()
    control.close()
    _close_all(list(inherited))
    launch_fd, result_fd, stdout_fd, stderr_fd = fds
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    _close_all([stdout_fd, stderr_fd])
    # Python reseeds `random` after a fork; numpy's global generator would repeat the zygote's stream in
    # every job, where a fresh process draws a fresh seed.
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    return launch_fd, result_fd


def _other_threads() -> list[str]:
    own = str(os.getpid())
    names = []
    for tid in os.listdir("/proc/self/task"):
        if tid == own:
            continue
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                names.append(comm.read().strip())
        except OSError:
            pass                         # it ended meanwhile
    return sorted(names)


def _gpu_driver_open() -> bool:
    """Whether the imports opened the NVIDIA driver (torch.cuda.is_available() at import does): CUDA set up
    before a fork cannot be used in the child."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("/dev/nvidia"):
                return True
        except OSError:
            pass                         # closed meanwhile (the listing's own descriptor)
    return False


def _stop_blas_threads() -> None:
    """Stops OpenBLAS's thread pools (numpy's, scipy's): what OpenBLAS's own handler does before any fork.
    A child starts its pool again at its first threaded BLAS call."""
    with open("/proc/self/maps") as maps:
        libraries = {line.split()[-1] for line in maps if "openblas" in line.rsplit("/", 1)[-1]}
    for path in sorted(p for p in libraries if p.startswith("/")):
        try:
            getattr(ctypes.CDLL(path), "blas_thread_shutdown_")()
        except (OSError, AttributeError):
            pass                         # another build: its threads, if any, keep the zygote a spare


def _send(control: socket.socket, message: dict[str, Any]) -> None:
    try:
        control.send(json.dumps(message).encode("utf-8"))
    except OSError:
        os._exit(0)                      # the task is gone


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass

