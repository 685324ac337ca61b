"""Single-host launcher: ``python -m collective.run -np N [--timeout S] script.py args...``.

Runs N copies of a Python script as ranks of one job: starts a rendezvous server, exports the
rank's identity through environment variables (names owned by collective.config), prefixes
every output line with ``[rank]: ``, and tears the whole job down as soon as one rank fails.

This module must stay importable without the C++ extension: it only starts processes.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import io
import os
import queue
import secrets
import signal
import site
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, BinaryIO, Callable, Mapping

from collective.bootstrap.rendezvous import RendezvousServer
from collective.config import (
    default_host_key,
    env_for_rank,
    format_host_port,
    inherited_environ,
)

TIMEOUT_EXIT_CODE = 124
# launch() ended early by Stopper.stop(): the ranks were stopped as SIGTERM would stop them.
STOPPED_EXIT_CODE = 128 + signal.SIGTERM
DEFAULT_TERM_GRACE_S = 5.0
LAUNCHER_TAG = "[collective.run]"
# After every rank has exited, how long to keep draining its pipes. A grandchild that
# inherited the pipe can hold it open forever; its output is not worth hanging the launcher.
_DRAIN_DEADLINE_S = 5.0
# How long SIGKILLed ranks get to be reaped before we stop waiting (e.g. stuck in D state).
_REAP_DEADLINE_S = 10.0
_LINE_LIMIT = 1 << 16
_PR_SET_PDEATHSIG = 1
_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def launch(
    script_args: list[str],
    num_proc: int,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    *,
    host_key_per_rank: bool = False,
    term_grace_s: float = DEFAULT_TERM_GRACE_S,
    stdout: IO | None = None,
    stderr: IO | None = None,
    timeline: str | None = None,
    stopper: "Stopper | None" = None,
) -> int:
    """Runs ``python script_args...`` as ``num_proc`` ranks and returns the job's exit code.

    0 when every rank exits 0; the first failing rank's exit code (1 if it died by a signal);
    124 when ``timeout_s`` elapses; 128+signum when the launcher itself is signalled;
    ``STOPPED_EXIT_CODE`` when ``stopper.stop()`` ended the job (from any thread).
    ``env`` is the base environment for the ranks (default: this process's environment).
    ``host_key_per_rank`` gives every rank its own host key, so same-host ranks are treated
    as remote (no shared memory) - useful to exercise the TCP path on one machine.
    ``timeline`` names the Chrome-trace JSON file that rank 0's engine writes.
    Children are tied to the calling *thread* via PR_SET_PDEATHSIG, so call this from a thread
    that outlives the job (normally the main thread).
    """
    if not script_args:
        raise ValueError("launch() needs a script to run")
    if num_proc < 1:
        raise ValueError(f"num_proc must be >= 1, got {num_proc}")
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    out = LineSink(stdout if stdout is not None else sys.stdout)
    err = LineSink(stderr if stderr is not None else sys.stderr)
    secret = secrets.token_bytes(32)
    server = RendezvousServer("127.0.0.1", 0, secret=secret)
    job = _Job(out, err)
    if stopper is not None:
        stopper._attach(job.events)
    # Signals are forwarded for the whole lifetime, teardown included, so a second ^C cannot
    # interrupt the cleanup half-way and orphan ranks.
    with _SignalsAsEvents(job.events):
        server.start()
        try:
            rendezvous = format_host_port(*server.address)
            host_key = default_host_key() if host_key_per_rank else None
            for rank in range(num_proc):
                child_env = inherited_environ() if env is None else dict(env)
                child_env.update(env_for_rank(
                    rank, num_proc, rendezvous, secret,
                    host_key=f"{host_key}/rank{rank}" if host_key else None, timeline=timeline))
                child_env["PYTHONUNBUFFERED"] = "1"
                pythonpath = _pythonpath_with_package(child_env.get("PYTHONPATH"))
                if pythonpath:
                    child_env["PYTHONPATH"] = pythonpath
                job.spawn(rank, [sys.executable, *script_args], child_env)
            return job.supervise(timeout_s, term_grace_s)
        finally:
            job.kill_all()
            job.drain_output(_DRAIN_DEADLINE_S)
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = _argument_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits on --help and usage errors; main() returns instead
        return e.code if isinstance(e.code, int) else 2
    return launch(
        [args.script, *args.script_args],
        args.num_proc,
        args.timeout,
        host_key_per_rank=args.host_key_per_rank,
        term_grace_s=args.term_grace,
        timeline=os.path.abspath(args.timeline) if args.timeline else None,
    )


def _argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m collective.run",
        description="Run a Python script as N ranks of a collective job on this host.",
    )
    parser.add_argument("-np", "--num-proc", dest="num_proc", type=_positive_int, required=True,
                        help="number of ranks to start")
    parser.add_argument("--timeout", type=_positive_float, default=None, metavar="S",
                        help=f"kill the job and exit {TIMEOUT_EXIT_CODE} after S seconds")
    parser.add_argument("--host-key-per-rank", action="store_true",
                        help="treat every rank as a separate host (disables shared memory)")
    parser.add_argument("--timeline", metavar="FILE", default=None,
                        help="write a Chrome trace (Perfetto) of rank 0's collectives to FILE")
    parser.add_argument("--term-grace", type=_positive_float, default=DEFAULT_TERM_GRACE_S,
                        metavar="S", help="seconds between SIGTERM and SIGKILL on teardown")
    parser.add_argument("script", help="Python script to run on every rank")
    parser.add_argument("script_args", nargs=argparse.REMAINDER,
                        help="arguments passed to the script")
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


@dataclass(frozen=True)
class _Exited:
    rank: int
    returncode: int


@dataclass(frozen=True)
class _Signalled:
    signum: int


@dataclass(frozen=True)
class _Stopped:
    pass


class Stopper:
    """Lets another thread end a ``launch()``: ``stop()`` tears the ranks down as a signal would.

    A caller that runs ``launch()`` in a thread of its own (signal handlers only work in the main
    thread) uses this to cancel it. Stopping before the launch starts ends it right after spawning.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: "queue.SimpleQueue[Any] | None" = None
        self._stopped = False

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._events is not None:
                self._events.put(_Stopped())

    def _attach(self, events: "queue.SimpleQueue[Any]") -> None:
        with self._lock:
            self._events = events
            if self._stopped:
                events.put(_Stopped())


class LineSink:
    """Writes whole lines to one stream; the lock keeps lines from different ranks intact."""

    def __init__(self, stream: IO) -> None:
        if isinstance(stream, (io.RawIOBase, io.BufferedIOBase)):
            self._binary: BinaryIO | None = stream  # type: ignore[assignment]
        else:
            self._binary = getattr(stream, "buffer", None)
        self._text = stream
        self._lock = threading.Lock()
        self._broken = False

    def write_line(self, prefix: bytes, chunk: bytes) -> None:
        # A final line without '\n' still gets one, or the next rank's prefix would be glued on.
        line = prefix + chunk + (b"" if chunk.endswith(b"\n") else b"\n")
        with self._lock:
            if self._broken:
                return
            try:
                if self._binary is not None:
                    self._binary.write(line)
                    self._binary.flush()
                else:
                    self._text.write(line.decode("utf-8", "replace"))
                    self._text.flush()
            except (OSError, ValueError):
                # e.g. `| head` closed our stdout. Keep accepting lines so the pumps keep
                # draining the ranks' pipes; otherwise the ranks would block on a full pipe.
                self._broken = True

    def message(self, text: str) -> None:
        self.write_line(f"{LAUNCHER_TAG} ".encode(), text.encode("utf-8", "replace"))


class _Job:
    """The ranks' processes, their output pumps, and the queue of exit events."""

    def __init__(self, out: LineSink, err: LineSink) -> None:
        self._out = out
        self._err = err
        # SimpleQueue.put is reentrant, so the signal handler may post to it safely.
        self.events: queue.SimpleQueue[_Exited | _Signalled | _Stopped] = queue.SimpleQueue()
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._running: set[int] = set()
        self._pumps: list[threading.Thread] = []
        self._child_setup = child_setup_for(os.getpid())

    def spawn(self, rank: int, argv: list[str], env: dict[str, str]) -> None:
        proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, preexec_fn=self._child_setup, close_fds=True,
        )
        self._procs[rank] = proc
        self._running.add(rank)
        prefix = f"[{rank}]: ".encode()
        assert proc.stdout is not None and proc.stderr is not None
        for pipe, sink, name in ((proc.stdout, self._out, "out"), (proc.stderr, self._err, "err")):
            pump = threading.Thread(target=_pump_lines, args=(pipe, sink, prefix),
                                    name=f"rank{rank}-std{name}", daemon=True)
            pump.start()
            self._pumps.append(pump)
        # Daemon: it returns when the child exits, which kill_all() guarantees.
        threading.Thread(target=self._report_exit, args=(rank, proc),
                         name=f"rank{rank}-wait", daemon=True).start()

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
                    f"{len(self._procs)} ranks ({len(self._running)} still running)")
                self.terminate(signal.SIGTERM, term_grace_s)
                return TIMEOUT_EXIT_CODE
            if isinstance(event, _Signalled):
                name = signal.Signals(event.signum).name
                self._err.message(f"launcher received {name}; stopping all ranks")
                self.terminate(event.signum, term_grace_s)
                return 128 + event.signum
            if isinstance(event, _Stopped):
                self._err.message("stop requested; stopping all ranks")
                self.terminate(signal.SIGTERM, term_grace_s)
                return STOPPED_EXIT_CODE
            self._running.discard(event.rank)
            if event.returncode != 0:
                others = len(self._running)
                self._err.message(
                    f"rank {event.rank} failed first: {describe_exit(event.returncode)}; "
                    f"terminating the {others} other running rank(s)")
                self.terminate(signal.SIGTERM, term_grace_s)
                return event.returncode if event.returncode > 0 else 1
        return 0

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
            self._err.message(f"rank {rank} (pid {self._procs[rank].pid}) could not be reaped")

    def drain_output(self, deadline_s: float) -> None:
        deadline = time.monotonic() + deadline_s
        for pump in self._pumps:
            pump.join(max(0.0, deadline - time.monotonic()))

    def _await_exits(self, deadline: float) -> None:
        while self._running:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                event = self.events.get(timeout=remaining)
            except queue.Empty:
                return
            if isinstance(event, _Exited):
                self._running.discard(event.rank)
            # A second signal (or stop) during teardown changes nothing: SIGKILL follows anyway.

    def _signal_groups(self, signum: int, *, only_running: bool) -> None:
        for rank, proc in self._procs.items():
            if only_running and rank not in self._running:
                continue
            # Each rank leads its own group (set in _child_setup), so its pid is the pgid.
            try:
                os.killpg(proc.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def _report_exit(self, rank: int, proc: subprocess.Popen[bytes]) -> None:
        self.events.put(_Exited(rank, proc.wait()))


def _pump_lines(pipe: BinaryIO, sink: LineSink, prefix: bytes) -> None:
    """Copies a child's pipe to the sink line by line, until EOF (partial last line included)."""
    try:
        # Blocking reads end at EOF, when the child and anything inheriting the pipe exit.
        for chunk in iter(lambda: pipe.readline(_LINE_LIMIT), b""):
            sink.write_line(prefix, chunk)
    finally:
        pipe.close()


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
        # Own process group: teardown signals reach the rank's own children too, and a ^C
        # in the terminal goes to the launcher only, which then stops the ranks in order.
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
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


class _SignalsAsEvents:
    """Context manager: while active, SIGINT/SIGTERM/SIGHUP become events for supervise()."""

    def __init__(self, events: "queue.SimpleQueue[_Exited | _Signalled]") -> None:
        self._events = events
        self._previous: dict[int, object] = {}

    def __enter__(self) -> None:
        # signal.signal only works in the main thread; elsewhere the caller keeps its handlers.
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in _FORWARDED_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: object) -> None:
        self._events.put(_Signalled(signum))


def _pythonpath_with_package(current: str | None) -> str:
    """Lets ranks ``import collective`` from a source checkout, as the launcher itself did.

    ``python script.py`` puts the script's directory on sys.path, not the launcher's, so a
    package that is not installed would otherwise be invisible to the ranks.
    """
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    installed = set(site.getsitepackages()) | {site.getusersitepackages()}
    parts = [p for p in (current or "").split(os.pathsep) if p]
    if package_root in installed or package_root in parts:
        return os.pathsep.join(parts)
    return os.pathsep.join([package_root, *parts])


if __name__ == "__main__":
    sys.exit(main())
