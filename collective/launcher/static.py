"""Launcher: a job of a fixed number of ranks (``collective.run -np N``), on this host or on the hosts given.

Starts a rendezvous server, exports each rank's identity through environment variables (names owned by
collective.config), prefixes every output line with ``[rank]<stdout>:`` or ``[rank]<stderr>:`` as horovodrun
does, and tears the whole job down as soon as one rank fails. Without hosts every rank runs here; with hosts
(horovodrun's ``-H``) ranks fill them in order, and those on other hosts are started over ssh
(collective.launcher.hosts, collective.launcher.remote_rank).

This module must stay importable without the C++ extension: it only starts processes.
"""

from __future__ import annotations

import socket
from typing import IO, Mapping

from collective.bootstrap.interfaces import nic_addresses
from collective.config import default_host_key, env_for_rank, horovod_env_for_rank, inherited_environ
from collective.launcher.events import Stopper
from collective.launcher.hosts import (
    HostSlots,
    SshOptions,
    assign_ranks,
    check_hosts_reachable,
    is_local,
    remote_rank_command,
    remote_rank_request,
    rendezvous_address,
)
from collective.launcher.rank_process import pythonpath_with_package, rank_command, rank_environment
from collective.launcher.session import JobSession, job_session
from collective.topology import topology_from_host_keys

DEFAULT_TERM_GRACE_S = 5.0
DEFAULT_START_TIMEOUT_S = 30.0
# Variables that describe this machine or shell, not the job: a remote rank gets its host's own.
_LOCAL_ONLY_VARIABLES = frozenset({"HOSTNAME", "PWD", "OLDPWD", "SHLVL", "_"})


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
    stopper: Stopper | None = None,
    hosts: list[HostSlots] | None = None,
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
    base_env = inherited_environ() if env is None else dict(env)
    with job_session(rendezvous_address(remote, nics), base_env, stdout, stderr, "collective-run-reports-",
                     stopper) as session:
        plan = _Placement(num_proc, placement, remote, default_host_key() if host_key_per_rank else None)
        for rank in range(num_proc):
            _spawn_rank(session, plan, rank, script_args, base_env, timeline, nics, ssh, start_timeout_s)
        return session.job.supervise(timeout_s, term_grace_s)


class _Placement:
    """Where each rank runs, and which host each counts as for its local and cross ranks."""

    def __init__(self, num_proc: int, placement: list[str] | None, remote: list[str], host_key: str | None) -> None:
        self.num_proc, self.placement, self.remote, self.host_key = num_proc, placement, remote, host_key
        self.rank_hosts = [f"{host_key}/rank{rank}" if host_key else "one host" for rank in range(num_proc)]
        if placement:
            self.rank_hosts = [f"{name}/rank{rank}" if host_key else name for rank, name in enumerate(placement)]

    def remote_host(self, rank: int) -> str | None:
        """The other host that ``rank`` runs on, or None when it runs here."""
        return self.placement[rank] if self.placement and self.placement[rank] in self.remote else None


def _spawn_rank(session: JobSession, plan: _Placement, rank: int, script_args: list[str],
                base_env: Mapping[str, str], timeline: str | None, nics: tuple[str, ...] | None, ssh: SshOptions,
                start_timeout_s: float) -> None:
    identity = env_for_rank(rank, plan.num_proc, session.rendezvous, session.secret,
                            host_key=f"{plan.host_key}/rank{rank}" if plan.host_key else None, timeline=timeline,
                            nics=nics, failure_report=session.job.report_path(rank))
    hostname = plan.placement[rank] if plan.placement else socket.gethostname()
    horovod = horovod_env_for_rank(topology_from_host_keys(rank, plan.rank_hosts), hostname)
    child_env = rank_environment(base_env, identity, horovod)
    argv = rank_command(script_args)
    remote_host = plan.remote_host(rank)
    if remote_host is None:
        session.job.spawn(rank, argv, child_env)
        return
    rank_env = {k: v for k, v in child_env.items() if k not in _LOCAL_ONLY_VARIABLES and not k.startswith("SSH_")}
    pythonpath = pythonpath_with_package(child_env.get("PYTHONPATH")) or None
    session.job.spawn(rank, remote_rank_command(remote_host, ssh, start_timeout_s, pythonpath),
                      inherited_environ(), stdin_line=remote_rank_request(argv, rank_env), remote_host=remote_host)
