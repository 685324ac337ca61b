"""Launcher: the local launcher's API, which ``python -m collective.run`` is a command line over (as
``torch.distributed.run`` is over its launcher API). It starts a job's ranks as supervised processes on this
host or over ssh, serves their rendezvous, prefixes their output and names the root cause when one fails.

Every module here runs in the launcher's process, except ``remote_rank`` (on a rank's host, under ssh).
``spark_hvd`` reuses the supervision (``processes``, ``LineSink``, ``output_prefix``) and, in local mode,
``launch`` with a ``Stopper``.

This package must stay importable without the C++ extension: it only starts processes.
"""

from collective.launcher.elastic import ELASTIC_TIMEOUT_EXIT_CODE, launch_elastic
from collective.launcher.events import Stopper
from collective.launcher.hosts import HostSlots, SshOptions, parse_hostfile, parse_hosts
from collective.launcher.job import STOPPED_EXIT_CODE, TIMEOUT_EXIT_CODE
from collective.launcher.line_sink import LAUNCHER_TAG, LineSink
from collective.launcher.static import DEFAULT_START_TIMEOUT_S, DEFAULT_TERM_GRACE_S, launch

__all__ = [
    "DEFAULT_START_TIMEOUT_S", "DEFAULT_TERM_GRACE_S", "ELASTIC_TIMEOUT_EXIT_CODE", "LAUNCHER_TAG", "HostSlots",
    "LineSink", "STOPPED_EXIT_CODE", "SshOptions", "Stopper", "TIMEOUT_EXIT_CODE", "launch", "launch_elastic",
    "parse_hostfile", "parse_hosts",
]
