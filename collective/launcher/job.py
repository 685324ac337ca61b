"""Launcher: the ranks' processes of one job, their output pumps, the queue of their exits, and how the job
is judged and torn down (the first failure names its root cause, from the ranks' own reports).

This module must stay importable without the C++ extension: it only starts processes.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from typing import Any

from collective.failures.report import REPORT_LAG_S, read_report, root_cause
from collective.launcher.events import Event, Exited, Signalled, Stopped
from collective.launcher.line_sink import LineSink
from collective.launcher.output_prefix import rank_line_prefix
from collective.launcher.processes import ChildProcess, describe_exit

TIMEOUT_EXIT_CODE = 124
# launch() ended early by Stopper.stop(): the ranks were stopped as SIGTERM would stop them.
STOPPED_EXIT_CODE = 128 + signal.SIGTERM
# ssh's own exit code when the connection failed or dropped (a remote command's code is passed through).
_SSH_FAILED = 255
# How long SIGKILLed ranks get to be reaped before we stop waiting (e.g. stuck in D state).
_REAP_DEADLINE_S = 10.0


class Job:
    """The ranks' processes (keyed by rank, or by an elastic worker's id), their output pumps, and the queue
    of exit events."""

    def __init__(self, out: LineSink, err: LineSink, report_dir: str) -> None:
        self._out = out
        self._err = err
        self._report_dir = report_dir
        # SimpleQueue.put is reentrant, so the signal handler may post to it safely.
        self.events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._children: dict[Any, ChildProcess] = {}
        self._running: set[Any] = set()
        self._remote_hosts: dict[Any, str] = {}  # rank -> the host its ssh reaches

    def spawn(self, rank: Any, argv: list[str], env: dict[str, str], *, stdin_line: bytes | None = None,
              remote_host: str | None = None) -> None:
        sinks = {"stdout": self._out, "stderr": self._err}
        prefixes = {stream: rank_line_prefix(rank, stream) for stream in sinks}
        child = ChildProcess(argv, env, lambda stream, chunk: sinks[stream].write_line(prefixes[stream], chunk),
                             name=f"rank{rank}", stdin_line=stdin_line)
        if remote_host is not None:
            self._remote_hosts[rank] = remote_host
        self._children[rank] = child
        self._running.add(rank)
        # Daemon: it returns when the child exits, which kill_all() guarantees.
        threading.Thread(target=self._report_exit, args=(rank, child.proc),
                         name=f"rank{rank}-wait", daemon=True).start()

    def forget(self, rank: Any) -> None:
        """Stops counting ``rank`` as running (an elastic driver that handled its exit itself)."""
        self._running.discard(rank)

    def supervise(self, timeout_s: float | None, term_grace_s: float) -> int:
        """Waits for all ranks; on the first failure, timeout or signal tears the job down."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self._running:
            wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                event = self.events.get(timeout=wait_s)
            except queue.Empty:
                self._err.message(
                    f"job exceeded --timeout of {timeout_s:g}s; killing all "
                    f"{len(self._children)} ranks ({len(self._running)} still running)")
                self.terminate(signal.SIGTERM, term_grace_s)
                return TIMEOUT_EXIT_CODE
            if isinstance(event, Signalled):
                name = signal.Signals(event.signum).name
                self._err.message(f"launcher received {name}; stopping all ranks")
                self.terminate(event.signum, term_grace_s)
                return 128 + event.signum
            if isinstance(event, Stopped):
                self._err.message("stop requested; stopping all ranks")
                self.terminate(signal.SIGTERM, term_grace_s)
                return STOPPED_EXIT_CODE
            self._running.discard(event.rank)
            if event.returncode != 0:
                root, how = self._blame(event)
                self._err.message(
                    f"rank {root} failed first: {how}; terminating the {len(self._running)} other running rank(s)")
                self.terminate(signal.SIGTERM, term_grace_s)
                return event.returncode if event.returncode > 0 else 1
        return 0

    def report_path(self, rank: Any) -> str:
        return os.path.join(self._report_dir, f"rank{rank}.json")

    def remove_reports(self) -> None:
        shutil.rmtree(self._report_dir, ignore_errors=True)

    def _blame(self, first: Exited) -> tuple[int, str]:
        """The root cause of a failure, from the ranks' own reports, never from the order of their exits.

        The first rank to exit may only have noticed another's failure (its report names the peer it was
        waiting on): then the named peer is blamed once it has exited or had a moment to, and a peer still
        running by then has stopped responding.
        """
        exits = {first.rank: first.returncode}
        deadline = time.monotonic() + REPORT_LAG_S
        while True:
            # A rank writes its report just before it exits (an interpreter can take seconds to end).
            reports = {rank: read_report(self.report_path(rank)) for rank in self._children}
            waiting_on = {r: rep.blamed_rank for r, rep in reports.items() if rep is not None and rep.peer_failure}
            root = root_cause(first.rank, waiting_on)
            settled = root not in waiting_on and (root in exits or reports[root] is not None)
            if settled or not self._await_one_exit(exits, deadline):
                break
        if root in exits and exits[root] == 0:
            root = first.rank  # it finished its work; whoever reacted to it has the story
        first_report, own = reports.get(first.rank), reports.get(root)
        if root in exits:
            how = describe_exit(exits[root]) + (f": {own.summary}" if own is not None else "")
            if root in self._remote_hosts:
                how = f"on host {self._remote_hosts[root]}, {how}"
                if exits[root] == _SSH_FAILED and own is None:
                    how += " (ssh's code: the connection to that host failed or dropped)"
        else:
            how = own.summary if own is not None else "stopped responding"
        if root != first.rank and first_report is not None:
            how += f" (rank {first.rank} noticed: {first_report.summary})"
        return root, how

    def _await_one_exit(self, exits: dict[int, int], deadline: float) -> bool:
        """Waits for the next rank to exit, until ``deadline``; a signal or stop request ends the wait
        and stays queued for the supervisor."""
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not self._running:
            return False
        try:
            event = self.events.get(timeout=remaining)
        except queue.Empty:
            return False
        if not isinstance(event, Exited):
            self.events.put(event)
            return False
        self._running.discard(event.rank)
        exits[event.rank] = event.returncode
        return True

    def terminate(self, first_signal: int, grace_s: float) -> None:
        """Sends ``first_signal`` to every rank's process group, then SIGKILL after grace_s."""
        self._signal_groups(first_signal, only_running=True)
        self._await_exits(time.monotonic() + grace_s)
        if self._running:
            self._err.message(
                f"rank(s) {sorted(self._running)} ignored {signal.Signals(first_signal).name} "
                f"for {grace_s:g}s; sending SIGKILL")

    def kill_all(self) -> None:
        """SIGKILLs whatever is left of every rank's process group, including grandchildren."""
        self._signal_groups(signal.SIGKILL, only_running=False)
        self._await_exits(time.monotonic() + _REAP_DEADLINE_S)
        for rank in sorted(self._running):
            self._err.message(f"rank {rank} (pid {self._children[rank].pid}) could not be reaped")

    def drain_output(self, deadline_s: float) -> None:
        deadline = time.monotonic() + deadline_s
        for child in self._children.values():
            child.drain_output(deadline)

    def _await_exits(self, deadline: float) -> None:
        while self._running:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                event = self.events.get(timeout=remaining)
            except queue.Empty:
                return
            if isinstance(event, Exited):
                self._running.discard(event.rank)
            # A second signal (or stop) during teardown changes nothing: SIGKILL follows anyway.

    def _signal_groups(self, signum: int, *, only_running: bool) -> None:
        for rank, child in self._children.items():
            if not only_running or rank in self._running:
                child.signal_group(signum)

    def _report_exit(self, rank: Any, proc: subprocess.Popen[bytes]) -> None:
        self.events.put(Exited(rank, proc.wait()))
