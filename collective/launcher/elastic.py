"""Launcher: an elastic job (``python -m collective.run --min-np 2 --max-np 4 --host-discovery-script S train.py``).

As horovodrun's elastic mode: the driver runs the discovery script every ``discovery_interval_s`` and starts
a worker on each free slot (up to ``--max-np``); every worker of this launcher runs on this machine, the
discovered hosts name emulated hosts (each its own host key, so ranks of one host share memory and others
talk TCP). The driver keeps the rendezvous in rounds (collective/elastic/protocol.py):

- a worker lost (killed, or exited without an exception of its own): its host is blacklisted, as Horovod's,
  and the survivors re-form without it;
- a worker added: the next round lists it, the running round is marked updated and its members move on at
  their next commit (``HostsUpdatedInterrupt``);
- an exception in a worker's own code fails the job naming it (a retry would raise it again);
- fewer than ``--min-np`` workers for longer than ``--elastic-timeout``: the job fails with ElasticTimeoutError.
"""

from __future__ import annotations

import queue
import signal
import time
from typing import IO, Mapping

from collective.bootstrap.rendezvous import RendezvousClient
from collective.config import default_host_key, env_for_elastic_worker, inherited_environ
from collective.elastic.discovery import DiscoveryError, discover_hosts
from collective.elastic.protocol import ROUND_COUNTER_KEY, Round, round_key, updated_key
from collective.failures.report import read_report
from collective.launcher.events import Exited, Signalled
from collective.launcher.job import TIMEOUT_EXIT_CODE
from collective.launcher.processes import describe_exit
from collective.launcher.rank_process import rank_command, rank_environment
from collective.launcher.session import JobSession, job_session
from collective.launcher.static import DEFAULT_TERM_GRACE_S

DEFAULT_ELASTIC_TIMEOUT_S = 600.0  # Horovod's
DEFAULT_DISCOVERY_INTERVAL_S = 1.0  # Horovod's
ELASTIC_TIMEOUT_EXIT_CODE = 3


def launch_elastic(
    script_args: list[str],
    discovery_script: str,
    min_np: int,
    max_np: int,
    *,
    elastic_timeout_s: float = DEFAULT_ELASTIC_TIMEOUT_S,
    timeout_s: float | None = None,
    discovery_interval_s: float = DEFAULT_DISCOVERY_INTERVAL_S,
    env: Mapping[str, str] | None = None,
    term_grace_s: float = DEFAULT_TERM_GRACE_S,
    stdout: IO | None = None,
    stderr: IO | None = None,
) -> int:
    """Runs ``python script_args...`` as an elastic job and returns its exit code: 0 once the workers finish,
    a failing worker's code when its own code failed, ``ELASTIC_TIMEOUT_EXIT_CODE`` below ``min_np`` for
    longer than ``elastic_timeout_s``, 124 past ``timeout_s``, 128+signum when signalled."""
    if not script_args:
        raise ValueError("launch_elastic() needs a script to run")
    if not 1 <= min_np <= max_np:
        raise ValueError(f"need 1 <= min_np <= max_np, got min_np={min_np}, max_np={max_np}")
    if not elastic_timeout_s > 0 or not discovery_interval_s > 0:
        raise ValueError("elastic_timeout_s and discovery_interval_s must be positive")
    base_env = inherited_environ() if env is None else dict(env)
    with job_session("127.0.0.1", base_env, stdout, stderr, "collective-elastic-reports-") as session:
        with RendezvousClient("127.0.0.1", session.server.address[1], session.knobs.connect_timeout_s,
                              secret=session.secret) as client:
            driver = _Driver(session, client, script_args, base_env, discovery_script, min_np, max_np,
                             elastic_timeout_s, discovery_interval_s)
            return driver.run(timeout_s, term_grace_s)


class _Driver:
    """The elastic driver's state: live workers, blacklisted hosts, the published round."""

    def __init__(self, session: JobSession, client: RendezvousClient, script_args: list[str],
                 base_env: dict[str, str], discovery_script: str, min_np: int, max_np: int,
                 elastic_timeout_s: float, discovery_interval_s: float) -> None:
        self._job, self._err, self._client = session.job, session.err, client
        self._script_args, self._base_env = script_args, base_env
        self._rendezvous, self._secret = session.rendezvous, session.secret
        self._discovery_script = discovery_script
        self._min_np, self._max_np = min_np, max_np
        self._elastic_timeout_s, self._interval_s = elastic_timeout_s, discovery_interval_s
        self._host_key_base = default_host_key()
        self._members: list[str] = []  # live workers in rank order (the last round, plus any not yet in one)
        self._blacklist: set[str] = set()
        self._round = 0
        self._finishing = False  # a worker finished its function: the job ends, no more re-forms
        self._short_since: float | None = time.monotonic()  # below min_np since (the start counts)

    def run(self, timeout_s: float | None, term_grace_s: float) -> int:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        next_discovery = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= next_discovery:
                self._discover()
                next_discovery = time.monotonic() + self._interval_s
            if self._short_since is not None and time.monotonic() - self._short_since > self._elastic_timeout_s:
                self._err.message(
                    f"ElasticTimeoutError: fewer than --min-np {self._min_np} workers ({len(self._members)} "
                    f"running) for longer than --elastic-timeout {self._elastic_timeout_s:g}s; stopping the job")
                self._job.terminate(signal.SIGTERM, term_grace_s)
                return ELASTIC_TIMEOUT_EXIT_CODE
            if not self._members and self._finishing:
                return 0
            wait_s = max(0.0, next_discovery - time.monotonic())
            if deadline is not None:
                wait_s = min(wait_s, max(0.0, deadline - time.monotonic()))
            try:
                event = self._job.events.get(timeout=wait_s)
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    self._err.message(f"job exceeded --timeout of {timeout_s:g}s; stopping the workers")
                    self._job.terminate(signal.SIGTERM, term_grace_s)
                    return TIMEOUT_EXIT_CODE
                continue
            if isinstance(event, Signalled):
                self._err.message(f"launcher received {signal.Signals(event.signum).name}; stopping all workers")
                self._job.terminate(event.signum, term_grace_s)
                return 128 + event.signum
            if isinstance(event, Exited):
                code = self._on_exit(str(event.rank), event.returncode)
                if code is not None:
                    self._job.terminate(signal.SIGTERM, term_grace_s)
                    return code

    def _on_exit(self, worker: str, returncode: int) -> int | None:
        """Handles a worker's exit; returns the job's exit code when it ends the job."""
        self._job.forget(worker)
        rank = self._members.index(worker) if worker in self._members else None
        if worker in self._members:
            self._members.remove(worker)
        if returncode == 0:
            self._finishing = True
            return None
        named = f"worker {worker}" + (f" (rank {rank} of round {self._round})" if rank is not None else "")
        report = read_report(self._job.report_path(worker))
        if report is not None and not report.peer_failure:
            self._err.message(f"{named} failed in its own code: {describe_exit(returncode)}: {report.summary}; "
                              "not retried")
            return returncode if returncode > 0 else 1
        if self._finishing:
            self._err.message(f"{named} failed after the job finished elsewhere: {describe_exit(returncode)}")
            return returncode if returncode > 0 else 1
        host = worker.rpartition(":")[0]
        self._blacklist.add(host)
        self._err.message(f"{named} lost: {describe_exit(returncode)}; host {host!r} blacklisted; "
                          f"{len(self._members)} worker(s) left")
        self._reform()
        return None

    def _discover(self) -> None:
        if self._finishing:
            return
        try:
            hosts = discover_hosts(self._discovery_script, max(self._interval_s, 10.0))
        except DiscoveryError as e:
            self._err.message(f"{e}; keeping the current workers")
            return
        added = []
        for host, slots in hosts.items():
            if host in self._blacklist:
                continue
            for slot in range(slots):
                worker = f"{host}:{slot}"
                if len(self._members) >= self._max_np:
                    break
                if worker not in self._members:
                    self._spawn(worker, host)
                    added.append(worker)
        if added:
            self._err.message(f"starting worker(s) {', '.join(added)}")
            self._reform(previous_updated=True)

    def _spawn(self, worker: str, host: str) -> None:
        identity = env_for_elastic_worker(worker, self._rendezvous, self._secret,
                                          host_key=f"{self._host_key_base}/{host}",
                                          elastic_timeout_s=self._elastic_timeout_s,
                                          failure_report=self._job.report_path(worker))
        env = rank_environment(self._base_env, identity)
        self._job.spawn(worker, rank_command(self._script_args), env)
        self._members.append(worker)

    def _reform(self, previous_updated: bool = False) -> None:
        """Publishes the next round with the live workers, or starts counting time below ``min_np``."""
        if len(self._members) < self._min_np:
            if self._short_since is None:
                self._short_since = time.monotonic()
                self._err.message(f"{len(self._members)} worker(s) left, fewer than --min-np {self._min_np}; "
                                  f"waiting up to {self._elastic_timeout_s:g}s for more slots")
            return
        self._short_since = None
        formation = Round(self._round + 1, tuple(self._members))
        self._client.set(round_key(formation.number), formation.encode())
        if previous_updated and self._round > 0:
            self._client.set(updated_key(self._round), b"1")  # its members move on at their next commit
        self._round = self._client.add(ROUND_COUNTER_KEY, 1)
        self._err.message(f"round {self._round}: {len(self._members)} worker(s) {', '.join(self._members)}")
