"""Launcher: what a job of either launcher (static or elastic) holds for its lifetime: its output sinks, its
secret, the rendezvous it serves, its ranks' processes and the signals it forwards, and the teardown that
leaves none of them behind.

This module must stay importable without the C++ extension: it only starts processes.
"""

from __future__ import annotations

import contextlib
import secrets
import sys
import tempfile
from dataclasses import dataclass
from typing import IO, Iterator, Mapping

from collective.bootstrap.rendezvous import RendezvousServer
from collective.config import Config, config_from_env, format_host_port
from collective.launcher.events import SignalsAsEvents, Stopper
from collective.launcher.job import Job
from collective.launcher.line_sink import LineSink

# After every rank has exited, how long to keep draining its pipes. A grandchild that
# inherited the pipe can hold it open forever; its output is not worth hanging the launcher.
_DRAIN_DEADLINE_S = 5.0


@dataclass(frozen=True)
class JobSession:
    job: Job
    err: LineSink
    secret: bytes
    knobs: Config          # the ranks' own knobs, read from their environment
    server: RendezvousServer
    rendezvous: str        # "host:port" of ``server``, as the ranks dial it


@contextlib.contextmanager
def job_session(host: str, env: Mapping[str, str], stdout: IO | None, stderr: IO | None, reports: str,
                stopper: Stopper | None = None) -> Iterator[JobSession]:
    """Serves a rendezvous on ``host`` for ranks whose environment is ``env`` and yields the job to start them
    in; on leaving, every rank's process group is killed, its output drained and its report removed.

    Signals are forwarded for the whole lifetime, teardown included, so a second ^C cannot interrupt the
    cleanup half-way and orphan ranks. ``reports`` prefixes the temporary folder of the ranks' failure reports.
    """
    out = LineSink(stdout if stdout is not None else sys.stdout)
    err = LineSink(stderr if stderr is not None else sys.stderr)
    secret = secrets.token_bytes(32)
    # The ranks' own knobs (their env), so that COLLECTIVE_HANDSHAKE_TIMEOUT covers this listener too.
    knobs = config_from_env(environ=env)
    server = RendezvousServer(host, 0, secret=secret, handshake_timeout_s=knobs.handshake_timeout_s)
    job = Job(out, err, tempfile.mkdtemp(prefix=reports))
    if stopper is not None:
        stopper.attach(job.events)
    with SignalsAsEvents(job.events):
        server.start()
        try:
            yield JobSession(job, err, secret, knobs, server, format_host_port(*server.address))
        finally:
            job.kill_all()
            job.drain_output(_DRAIN_DEADLINE_S)
            server.stop()
            job.remove_reports()
