"""Task: a rank's child process as its task sees it: spawn, feed, relay its output, collect its outcome."""

from __future__ import annotations

import os
import pickle
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Mapping

from collective.launcher.processes import ChildProcess, describe_exit
from collective.config import Config
from spark_hvd.errors import RankFailure
from spark_hvd.launch.framing import FrameError, read_frame, write_frame
from spark_hvd.launch.rank.rank_events import COMMIT_KIND, EVENT_KIND

# After the child exits, how long its output may still trickle in: a grandchild that inherited
# the pipes can hold them open forever, and its output is not worth hanging the task for.
_DRAIN_DEADLINE_S = 5.0
# How long a SIGKILLed child gets to be reaped before the task stops waiting for it.
_REAP_DEADLINE_S = 10.0
# Output lines a spare child may print (import warnings, say) before a task adopts it and relays them.
_SPARE_LINES_KEPT = 200


@dataclass(frozen=True)
class ChildOutcome:
    rank: int
    returncode: int
    result: bytes | None = None          # cloudpickled return value of fn, when it returned
    failure: RankFailure | None = None   # otherwise, why not
    reported: bool = False               # the failure came from the child's own report (not just its exit)


class RankChild:
    """Starts ``python -m spark_hvd.launch.rank.child_main`` (or has a zygote fork one) and relays its stdout/stderr
    line by line.

    The child leads its own process group and gets SIGKILL when this thread's process dies
    (PR_SET_PDEATHSIG; a forked one when its zygote dies, which dies with the worker), so it cannot
    outlive a killed Spark task. Create it from the thread that lives as long as the task (the Python
    worker's main thread).
    """

    def __init__(self, rank: int, env: Mapping[str, str], on_line: Callable[[str, str], None],
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 executable: str | None = None, zygote_fd: int | None = None, fork_from: Any = None) -> None:
        """``executable``: the Python interpreter to run the child with; default, this worker's.
        ``zygote_fd``: a spare's end of its control socket (zygote.py); ``fork_from``: a Zygote to fork the
        child from instead of starting one (the job then goes on as in an adopted spare: forked())."""
        self.rank = rank
        self._on_event = on_event
        self._on_line = on_line
        self._early_lines: list[tuple[str, str]] | None = None    # a spare's, until adopted
        self._line_lock = threading.Lock()
        self._on_failure_report: Callable[[RankFailure], None] | None = None
        self._on_commit: Callable[[int, bytes], None] | None = None
        launch_read, launch_write = os.pipe()
        result_read, result_write = os.pipe()
        try:
            # A ForkedProcess (zygote.py) offers the parts of a ChildProcess this class uses.
            self._child: Any
            if fork_from is not None:
                self._child = fork_from.fork(launch_read, result_write, self._chunk, name=f"spark-hvd-rank{rank}")
            else:
                extra_fds = () if zygote_fd is None else (zygote_fd,)
                self._child = ChildProcess(
                    [executable or sys.executable, "-m", "spark_hvd.launch.rank.child_main", str(launch_read),
                     str(result_write)],
                    env, self._chunk, pass_fds=(launch_read, result_write, *extra_fds), name=f"spark-hvd-rank{rank}")
        except BaseException as e:
            for fd in (launch_write, result_read):
                os.close(fd)
            if executable is not None and isinstance(e, OSError):
                # Name the argument: a bare "No such file" leaves the user guessing which file.
                raise OSError(e.errno, f"cannot start executable={executable!r} on host "
                                       f"{socket.gethostname()}: {e.strerror}") from e
            raise
        finally:
            # Only the child's copies remain, so either side sees EOF when the other goes away.
            os.close(launch_read)
            os.close(result_write)
        self._launch: BinaryIO = os.fdopen(launch_write, "wb")
        self._results: BinaryIO = os.fdopen(result_read, "rb")
        self._payload_writer: threading.Thread | None = None
        self._reader: threading.Thread | None = None

    @classmethod
    def spare(cls, env: Mapping[str, str], modules: tuple[str, ...], executable: str | None = None,
              zygote_fd: int | None = None) -> "RankChild":
        """A child that imports ``modules`` now and waits for a task to adopt it (spare_child), or, given
        its end of a control socket, forks a child per job (a zygote: zygote.py)."""
        early: list[tuple[str, str]] = []
        child = cls(-1, env, lambda stream, text: early.append((stream, text)), executable=executable,
                    zygote_fd=zygote_fd)
        with child._line_lock:
            child._early_lines = early
        preload: dict[str, Any] = {"kind": "preload", "modules": list(modules)}
        if zygote_fd is not None:
            preload["zygote"] = zygote_fd
        child._write_quietly(preload)
        return child

    @classmethod
    def forked(cls, zygote: Any, rank: int, env: Mapping[str, str], on_line: Callable[[str, str], None],
               on_event: Callable[[dict[str, Any]], None] | None) -> "RankChild":
        """``rank``'s child, forked by ``zygote`` (a Zygote): it takes ``env`` first, as an adopted spare does."""
        child = cls(rank, env, on_line, on_event, fork_from=zygote)
        child._write_quietly({"kind": "env", "env": dict(env)})
        return child

    def waiting(self) -> bool:
        """Still alive, and so still waiting for its fn (a spare's state until adopted)."""
        return self._child.proc.poll() is None

    def adopt(self, rank: int, env: Mapping[str, str], on_line: Callable[[str, str], None],
              on_event: Callable[[dict[str, Any]], None] | None) -> None:
        """A spare becomes ``rank``'s child: it takes ``env`` as its environment, and its output goes to
        this task from now on (and what it printed while waiting, first)."""
        self._write_quietly({"kind": "env", "env": dict(env)})
        self.rank = rank
        self._on_event = on_event
        with self._line_lock:
            early, self._early_lines = self._early_lines or [], None
            self._on_line = on_line
            for stream, text in early[-_SPARE_LINES_KEPT:]:
                on_line(stream, text)

    def relay_commits(self, on_commit: Callable[[int, bytes], None]) -> None:
        """Rank 0's commits under spark_hvd.run_elastic go to ``on_commit(seq, pickled snapshot)``."""
        self._on_commit = on_commit

    def _chunk(self, stream: str, chunk: bytes) -> None:
        self._line(stream, chunk.decode("utf-8", "replace").rstrip("\n"))

    def _line(self, stream: str, text: str) -> None:
        with self._line_lock:
            if self._early_lines is not None:
                if len(self._early_lines) < _SPARE_LINES_KEPT:
                    self._early_lines.append((stream, text))
                return
            self._on_line(stream, text)

    @property
    def pid(self) -> int:
        return self._child.pid

    def send_payload_in_background(self, payload: bytes) -> None:
        """Sends fn and its arguments without blocking: the child reads them while we meet peers."""
        self._payload_writer = threading.Thread(
            target=self._write_quietly, args=({"kind": "payload"}, payload),
            name=f"spark-hvd-rank{self.rank}-payload", daemon=True)
        self._payload_writer.start()

    def send_job(self, config: Config, context: Mapping[str, Any]) -> None:
        """The second and last launch frame: the Config the child joins the job with, and its RankContext.

        The Config goes as it is (pickled, on a pipe only our child reads), secret included: no
        environment variables to encode it in and parse it back from."""
        if self._payload_writer is not None:
            self._payload_writer.join()
        self._write_quietly({"kind": "job", "context": dict(context)}, pickle.dumps(config))
        try:
            self._launch.close()
        except OSError:
            pass

    def wait_outcome(self, exit_grace_s: float,
                     on_failure_report: Callable[[RankFailure], None] | None = None) -> ChildOutcome:
        """Blocks until the child reports and exits (or just dies); reaps it, drains its output.

        The report and the exit are awaited side by side: a grandchild that inherited the report
        pipe (a forked data-loader worker, say) can keep it open long after the child died.
        A failure report goes to ``on_failure_report`` as soon as it is read, before the child has
        exited: the interpreter's exit can take seconds (torch, TensorFlow), and meanwhile the
        peers' reports of this rank's departure must not be the first the driver hears.
        """
        self._on_failure_report = on_failure_report
        endings: "queue.SimpleQueue[str]" = queue.SimpleQueue()
        report: list[tuple[dict[str, Any], bytes] | None] = [None]
        reader = threading.Thread(target=self._read_report, args=(report, endings),
                                  name=f"spark-hvd-rank{self.rank}-report", daemon=True)
        reader.start()
        self._reader = reader
        threading.Thread(target=self._await_exit, args=(endings,),
                         name=f"spark-hvd-rank{self.rank}-wait", daemon=True).start()
        if endings.get() == "report" and report[0] is not None and report[0][0].get("ok"):
            try:
                self._child.proc.wait(timeout=exit_grace_s)
            except subprocess.TimeoutExpired:
                # fn returned but the process does not end (a non-daemon thread, say).
                self.kill()
        returncode = self._child.proc.wait()
        # fn is over; whatever it left running would only hold the pipes open.
        self._child.signal_group(signal.SIGKILL)
        # After the exit, a complete report is already in the pipe; only a torn one can block.
        reader.join(_DRAIN_DEADLINE_S)
        self._drain_output()
        return _outcome(self.rank, returncode, report[0])

    def _await_exit(self, endings: "queue.SimpleQueue[str]") -> None:
        self._child.proc.wait()
        endings.put("exit")

    def _read_report(self, report: list, endings: "queue.SimpleQueue[str]") -> None:
        try:
            # Events (spark_hvd.emit_event) and commits come first, the one report frame last.
            while True:
                frame = read_frame(self._results)
                if frame is not None and frame[0].get("kind") == COMMIT_KIND:
                    if self._on_commit is not None:
                        self._on_commit(int(frame[0].get("seq", 0)), frame[1])
                    continue
                if frame is None or frame[0].get("kind") != EVENT_KIND:
                    report[0] = frame
                    if frame is not None and not frame[0].get("ok") and self._on_failure_report is not None:
                        failure = _outcome(self.rank, None, frame).failure
                        if failure is not None:
                            self._on_failure_report(failure)
                    break
                if self._on_event is not None:
                    self._on_event(frame[0].get("data") or {})
        except (OSError, ValueError, FrameError):
            pass  # It died mid-report; its exit status tells the story.
        endings.put("report")

    def kill(self) -> None:
        """SIGKILLs the child's whole process group (its own children included)."""
        self._child.signal_group(signal.SIGKILL)

    def close(self) -> None:
        """Kills whatever is left of the group, grandchildren too, and reaps the child; idempotent."""
        self._child.signal_group(signal.SIGKILL)
        try:
            self._child.proc.wait(_REAP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            pass  # Stuck in the kernel (D state); the task must still end.
        self._drain_output()
        streams = [self._launch]
        # A reader still blocked on a torn report holds the stream's lock; closing would hang.
        if self._reader is None or not self._reader.is_alive():
            streams.append(self._results)
        for stream in streams:
            try:
                stream.close()
            except OSError:
                pass

    def _write_quietly(self, header: dict[str, Any], blob: bytes = b"") -> None:
        try:
            write_frame(self._launch, header, blob)
        except (OSError, ValueError):
            pass  # The child is gone; wait_outcome() reports how it ended.

    def _drain_output(self) -> None:
        self._child.drain_output(time.monotonic() + _DRAIN_DEADLINE_S)


def _outcome(rank: int, returncode: int | None, frame: tuple[dict[str, Any], bytes] | None) -> ChildOutcome:
    if frame is not None and frame[0].get("ok"):
        return ChildOutcome(rank, returncode, result=frame[1])
    if frame is not None:
        return ChildOutcome(rank, returncode, failure=RankFailure.from_wire(rank, frame[0], returncode), reported=True)
    return ChildOutcome(rank, returncode, failure=RankFailure(
        rank=rank, summary=f"its process {describe_exit(returncode)} before fn returned",
        exit_code=returncode))
