"""Launcher: ``python -m collective.run -np N [-H host1:2,host2:2 | --hostfile F] [--timeout S] script.py args...``.

Runs N copies of a Python script as ranks of one job: starts a rendezvous server, exports the
rank's identity through environment variables (names owned by collective.config), prefixes
every output line with ``[rank]<stdout>:`` or ``[rank]<stderr>:`` as horovodrun does, and tears the whole job down as soon as one rank fails.
Without hosts every rank runs here; with ``-H``/``--hostfile`` (as horovodrun) ranks fill the hosts
in order, and those on other hosts are started over ssh (collective.hosts, collective.remote_rank).

This module must stay importable without the C++ extension: it only starts processes.
"""

from __future__ import annotations

import argparse
import io
import os
import queue
import re
import secrets
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, BinaryIO, Mapping

from collective.bootstrap.rendezvous import RendezvousServer
from collective.failure_report import REPORT_LAG_S, read_report, root_cause
from collective.output_prefix import rank_line_prefix
from collective.processes import ChildProcess, describe_exit
from collective.config import (
    config_from_env,
    default_host_key,
    env_for_rank,
    format_host_port,
    normalize_nics,
    horovod_env_for_rank,
    inherited_environ,
)
from collective.hosts import (
    HostSlots,
    SshOptions,
    assign_ranks,
    check_hosts_reachable,
    is_local,
    rendezvous_address,
    parse_hostfile,
    parse_hosts,
    remote_rank_command,
    remote_rank_request,
)
from collective.bootstrap.interfaces import nic_addresses
from collective.topology import topology_from_host_keys

TIMEOUT_EXIT_CODE = 124
# launch() ended early by Stopper.stop(): the ranks were stopped as SIGTERM would stop them.
STOPPED_EXIT_CODE = 128 + signal.SIGTERM
DEFAULT_TERM_GRACE_S = 5.0
DEFAULT_START_TIMEOUT_S = 30.0
# ssh's own exit code when the connection failed or dropped (a remote command's code is passed through).
_SSH_FAILED = 255
# Variables that describe this machine or shell, not the job: a remote rank gets its host's own.
_LOCAL_ONLY_VARIABLES = frozenset({"HOSTNAME", "PWD", "OLDPWD", "SHLVL", "_"})
LAUNCHER_TAG = "[collective.run]"
# After every rank has exited, how long to keep draining its pipes. A grandchild that
# inherited the pipe can hold it open forever; its output is not worth hanging the launcher.
_DRAIN_DEADLINE_S = 5.0
# How long SIGKILLed ranks get to be reaped before we stop waiting (e.g. stuck in D state).
_REAP_DEADLINE_S = 10.0
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
    hosts: "list[HostSlots] | None" = None,
    nics: tuple[str, ...] | None = None,
    ssh: SshOptions = SshOptions(),
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
) -> int:
    """Runs ``python script_args...`` as ``num_proc`` ranks and returns the job's exit code.

    0 when every rank exits 0; the first failing rank's exit code (1 if it died by a signal);
    124 when ``timeout_s`` elapses; 128+signum when the launcher itself is signalled;
    ``STOPPED_EXIT_CODE`` when ``stopper.stop()`` ended the job (from any thread).
    ``env`` is the base environment for the ranks (default: this process's environment).
    ``host_key_per_rank`` gives every rank its own host key, so same-host ranks are treated
    as remote (no shared memory) - useful to exercise the TCP path on one machine.
    ``timeline`` names the Chrome-trace JSON file that rank 0's engine writes.
    ``hosts`` (horovodrun's ``-H``) places ranks on hosts in order; ranks on other hosts start over ``ssh``,
    and a host that ssh cannot reach within ``start_timeout_s`` raises RuntimeError naming it before any
    rank starts. ``nics`` (``--network-interface``) restricts the interfaces the ranks' mesh uses.
    Children are tied to the calling *thread* via PR_SET_PDEATHSIG, so call this from a thread
    that outlives the job (normally the main thread).
    """
    if not script_args:
        raise ValueError("launch() needs a script to run")
    if num_proc < 1:
        raise ValueError(f"num_proc must be >= 1, got {num_proc}")
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    placement = assign_ranks(hosts, num_proc) if hosts else None
    remote = [h for h in dict.fromkeys(placement or []) if not is_local(h)]
    if nics and not remote:
        nic_addresses(nics)  # every rank runs here: a wrong name is an error before anything starts
    check_hosts_reachable(remote, ssh, start_timeout_s)
    out = LineSink(stdout if stdout is not None else sys.stdout)
    err = LineSink(stderr if stderr is not None else sys.stderr)
    secret = secrets.token_bytes(32)
    # The ranks' own knobs (their env), so that COLLECTIVE_HANDSHAKE_TIMEOUT covers this listener too.
    knobs = config_from_env(environ=inherited_environ() if env is None else env)
    server = RendezvousServer(rendezvous_address(remote, nics), 0, secret=secret,
                              handshake_timeout_s=knobs.handshake_timeout_s)
    job = _Job(out, err, tempfile.mkdtemp(prefix="collective-run-reports-"))
    if stopper is not None:
        stopper._attach(job.events)
    # Signals are forwarded for the whole lifetime, teardown included, so a second ^C cannot
    # interrupt the cleanup half-way and orphan ranks.
    with _SignalsAsEvents(job.events):
        server.start()
        try:
            rendezvous = format_host_port(*server.address)
            host_key = default_host_key() if host_key_per_rank else None
            # Which host each rank counts as, for its local and cross ranks.
            rank_hosts = [f"{host_key}/rank{rank}" if host_key else "one host" for rank in range(num_proc)]
            if placement:
                rank_hosts = [f"{name}/rank{rank}" if host_key else name for rank, name in enumerate(placement)]
            for rank in range(num_proc):
                child_env = inherited_environ() if env is None else dict(env)
                child_env.update(env_for_rank(
                    rank, num_proc, rendezvous, secret,
                    host_key=f"{host_key}/rank{rank}" if host_key else None, timeline=timeline,
                    nics=nics, failure_report=job.report_path(rank)))
                hostname = placement[rank] if placement else socket.gethostname()
                child_env.update(horovod_env_for_rank(topology_from_host_keys(rank, rank_hosts), hostname))
                child_env["PYTHONUNBUFFERED"] = "1"
                pythonpath = _pythonpath_with_package(child_env.get("PYTHONPATH"))
                if pythonpath:
                    child_env["PYTHONPATH"] = pythonpath
                argv = rank_command(script_args)
                if placement and placement[rank] in remote:
                    rank_env = {k: v for k, v in child_env.items() if k not in _LOCAL_ONLY_VARIABLES
                                and not k.startswith("SSH_")}
                    job.spawn(rank, remote_rank_command(placement[rank], ssh, start_timeout_s, pythonpath or None),
                              inherited_environ(), stdin_line=remote_rank_request(argv, rank_env),
                              remote_host=placement[rank])
                else:
                    job.spawn(rank, argv, child_env)
            return job.supervise(timeout_s, term_grace_s)
        finally:
            job.kill_all()
            job.drain_output(_DRAIN_DEADLINE_S)
            server.stop()
            job.remove_reports()


_INTERPRETER_NAME = re.compile(r"python(\d+(\.\d+)?)?")


def rank_command(script_args: list[str]) -> list[str]:
    """The command each rank runs: this interpreter on ``script_args``. A leading ``python`` (horovodrun's
    form, ``-np 2 python -m pytest ...``) is accepted and replaced by this interpreter, so ranks use the
    same environment as the launcher."""
    if _INTERPRETER_NAME.fullmatch(os.path.basename(script_args[0])) or script_args[0] == sys.executable:
        return [sys.executable, *script_args[1:]]
    return [sys.executable, *script_args]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from collective import elastic_launcher  # elastic mode (--min-np, --max-np, --host-discovery-script)

    if elastic_launcher.is_elastic_command(argv):
        return elastic_launcher.main(argv)
    parser = _argument_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits on --help and usage errors; main() returns instead
        return e.code if isinstance(e.code, int) else 2
    try:
        hosts = parse_hostfile(args.hostfile) if args.hostfile else parse_hosts(args.hosts) if args.hosts else None
        return launch(
            [args.script, *args.script_args],
            args.num_proc,
            args.timeout,
            host_key_per_rank=args.host_key_per_rank,
            term_grace_s=args.term_grace,
            timeline=os.path.abspath(args.timeline) if args.timeline else None,
            hosts=hosts,
            nics=normalize_nics([n.strip() for n in args.network_interface.split(",") if n.strip()],
                                "--network-interface") if args.network_interface else None,
            ssh=SshOptions(port=args.ssh_port, identity_file=args.ssh_identity_file, config_file=args.ssh_config),
            start_timeout_s=args.start_timeout,
        )
    except (OSError, ValueError, RuntimeError) as e:
        print(f"{LAUNCHER_TAG} error: {e}", file=sys.stderr, flush=True)
        return 2


def _argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m collective.run",
        description="Run a Python script as N ranks of a collective job, on this host or on the hosts given.",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-H", "--hosts", default=None, metavar="HOST:SLOTS,...",
                       help="hosts and their slots, e.g. host1:2,host2:2; ranks fill them in order, "
                            "those on other hosts start over ssh")
    where.add_argument("--hostfile", default=None, metavar="FILE",
                       help="a file of hosts, one a line: 'HOST slots=N' (or HOST:N)")
    parser.add_argument("--network-interface", default=None, metavar="NICS",
                        help="comma-separated network interfaces the ranks may use, e.g. eth0")
    parser.add_argument("-p", "--ssh-port", type=_positive_int, default=None, help="ssh port on the hosts")
    parser.add_argument("-i", "--ssh-identity-file", default=None, metavar="FILE", help="ssh private key")
    parser.add_argument("--ssh-config", default=None, metavar="FILE", help="ssh configuration file (ssh -F)")
    parser.add_argument("--start-timeout", type=_positive_float, default=DEFAULT_START_TIMEOUT_S, metavar="S",
                        help="seconds for every host to answer over ssh before any rank starts")
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
    parser.add_argument("script", help="Python script to run on every rank (or horovodrun's "
                        "'python script.py' / 'python -m module')")
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

    def __init__(self, out: LineSink, err: LineSink, report_dir: str) -> None:
        self._out = out
        self._err = err
        self._report_dir = report_dir
        # SimpleQueue.put is reentrant, so the signal handler may post to it safely.
        self.events: queue.SimpleQueue[_Exited | _Signalled | _Stopped] = queue.SimpleQueue()
        self._children: dict[int, ChildProcess] = {}
        self._running: set[int] = set()
        self._remote_hosts: dict[int, str] = {}  # rank -> the host its ssh reaches

    def spawn(self, rank: int, argv: list[str], env: dict[str, str], *, stdin_line: bytes | None = None,
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
                root, how = self._blame(event)
                self._err.message(
                    f"rank {root} failed first: {how}; terminating the {len(self._running)} other running rank(s)")
                self.terminate(signal.SIGTERM, term_grace_s)
                return event.returncode if event.returncode > 0 else 1
        return 0

    def report_path(self, rank: int) -> str:
        return os.path.join(self._report_dir, f"rank{rank}.json")

    def remove_reports(self) -> None:
        shutil.rmtree(self._report_dir, ignore_errors=True)

    def _blame(self, first: _Exited) -> tuple[int, str]:
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
        if not isinstance(event, _Exited):
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
            if isinstance(event, _Exited):
                self._running.discard(event.rank)
            # A second signal (or stop) during teardown changes nothing: SIGKILL follows anyway.

    def _signal_groups(self, signum: int, *, only_running: bool) -> None:
        for rank, child in self._children.items():
            if not only_running or rank in self._running:
                child.signal_group(signum)

    def _report_exit(self, rank: int, proc: subprocess.Popen[bytes]) -> None:
        self.events.put(_Exited(rank, proc.wait()))


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
