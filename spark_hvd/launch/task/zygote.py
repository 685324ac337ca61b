"""Task: a zygote as its Spark Python worker sees it: a spare rank child that forks a fresh rank process per job.

The zygote is a spare (RankChild.spare) given a control socket; what runs in it is zygote/fork.py. Once its
imports are done it says whether it can fork. If so, each job's task asks it for a child, handing over the
child's pipes, and gets a ForkedProcess: a handle that a RankChild drives as it drives a spawned process
(exit status, kill by process group, output pumps). If not, the spare itself is adopted, as before zygotes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import threading
import time
from typing import Any, Callable, Mapping

from collective.launcher.processes import start_line_pumps
from spark_hvd.launch.task.rank_child import RankChild

# How long a task waits for a zygote to finish its imports before starting a process of its own (which
# would have to import the same modules: only a zygote stuck in its imports gets here).
_READY_DEADLINE_S = 600.0
# How long a fork request may take to be answered (the zygote is idle and only forks).
_FORK_DEADLINE_S = 60.0
_MESSAGE_BYTES = 4096


class ForkedProcess:
    """A rank process forked by a zygote, with the parts of ChildProcess (and of its Popen) RankChild uses.

    The zygote, its parent, reaps it and reports its exit status on the control socket."""

    def __init__(self, pid: int, outputs: tuple[int, int], on_line: Callable[[str, bytes], None], name: str) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = threading.Event()
        self._pumps = start_line_pumps((os.fdopen(outputs[0], "rb"), os.fdopen(outputs[1], "rb")), on_line, name)

    @property
    def proc(self) -> "ForkedProcess":
        return self                      # RankChild waits on child.proc, as on a Popen

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(f"forked rank process {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def drain_output(self, deadline: float) -> None:
        for pump in self._pumps:
            pump.join(max(0.0, deadline - time.monotonic()))

    def _ended(self, returncode: int) -> None:
        self.returncode = returncode
        self._exited.set()


class Zygote:
    """The task's handle on a zygote. Create it from the thread that lives as long as the worker (the
    zygote dies with that thread, and its children with it)."""

    def __init__(self, env: Mapping[str, str], modules: tuple[str, ...], executable: str | None = None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.spare = RankChild.spare(env, modules, executable=executable, zygote_fd=theirs.fileno())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._control = ours
        self._forkable: bool | None = None
        self._lock = threading.Lock()                  # one fork request at a time
        self._replies: list[dict[str, Any]] = []
        self._replied = threading.Condition()
        self._children: dict[int, ForkedProcess] = {}  # forked, not reported exited yet
        self._unclaimed_exits: dict[int, int] = {}     # reported before fork() registered the child
        self._gone = False                             # the control socket reached its end
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.spare.pid

    def alive(self) -> bool:
        return self.spare.waiting()

    def forkable(self) -> bool:
        """Waits for the zygote's imports, then says whether it forks (else its spare is to be adopted)."""
        if self._forkable is None:
            ready = select.select([self._control], [], [], _READY_DEADLINE_S)[0]
            message = self._receive() if ready else None
            self._forkable = bool(message and message.get("forkable"))
            if not self._forkable:
                self._control.close()    # a spare from now on (adopted, or gone)
            else:
                self._reader = threading.Thread(target=self._read_reports, name=f"spark-hvd-zygote{self.pid}",
                                                daemon=True)
                self._reader.start()
        return self._forkable

    def fork(self, launch_read: int, result_write: int, on_line: Callable[[str, bytes], None],
             name: str) -> ForkedProcess:
        """A fresh child of the zygote, on the given pipes (ours stay ours: the zygote gets duplicates)."""
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            with self._lock:
                socket.send_fds(self._control, [b"fork"], [launch_read, result_write, out_write, err_write])
                reply = self._next_reply()
                if "pid" not in reply:
                    raise OSError(f"the zygote (pid {self.pid}) did not fork: {reply.get('error', 'it is gone')}")
                child = ForkedProcess(int(reply["pid"]), (out_read, err_read), on_line, name)
                with self._replied:
                    if child.pid in self._unclaimed_exits:   # it died before we got here
                        child._ended(self._unclaimed_exits.pop(child.pid))
                    elif self._gone:                         # the zygote too, and the child with it
                        child._ended(-signal.SIGKILL)
                    else:
                        self._children[child.pid] = child
        except BaseException:
            for fd in (out_read, err_read):
                os.close(fd)
            raise
        finally:
            for fd in (out_write, err_write):
                os.close(fd)
        return child

    def close(self) -> None:
        """Ends the zygote (its children die with it) and reports them killed."""
        self.spare.close()
        try:
            self._control.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass                         # closed already (not forkable)
        if self._reader is None:
            self._control.close()

    def _next_reply(self) -> dict[str, Any]:
        with self._replied:
            if not self._replied.wait_for(lambda: self._replies or self._gone, _FORK_DEADLINE_S):
                return {"error": f"no answer within {_FORK_DEADLINE_S:.0f} s"}
            return self._replies.pop(0) if self._replies else {}

    def _read_reports(self) -> None:
        # Replies to fork requests go to the requester; exit reports to the child they are about.
        while True:
            message = self._receive()
            if message is None:
                break
            with self._replied:
                if "exited" in message:
                    pid, returncode = int(message["exited"]), int(message["returncode"])
                    child = self._children.pop(pid, None)
                    if child is not None:
                        child._ended(returncode)
                    else:
                        self._unclaimed_exits[pid] = returncode
                else:
                    self._replies.append(message)
                    self._replied.notify_all()
        # The zygote is gone, and its children with it (PDEATHSIG); make sure, then say so.
        with self._replied:
            orphans, self._children = list(self._children.values()), {}
            self._gone = True
            self._replied.notify_all()
        for child in orphans:
            child.signal_group(signal.SIGKILL)
            child._ended(-signal.SIGKILL)
        self._control.close()

    def _receive(self) -> dict[str, Any] | None:
        try:
            data = self._control.recv(_MESSAGE_BYTES)
        except OSError:
            return None
        return json.loads(data) if data else None
