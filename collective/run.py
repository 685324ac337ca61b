"""Launcher: ``python -m collective.run -np N [-H host1:2,host2:2 | --hostfile F] [--timeout S] script.py args...``.

The command line over the launcher API in collective.launcher (as ``torch.distributed.run`` is over its
launcher): it parses horovodrun's flags and calls ``launch``, or ``launch_elastic`` when ``--min-np``,
``--max-np`` or ``--host-discovery-script`` come before the script. ``launch``, ``Stopper`` and the exit codes
are also importable from here, as they always were.

This module must stay importable without the C++ extension: it only starts processes.
"""

from __future__ import annotations

import argparse
import os
import sys

from collective.config import normalize_nics
from collective.launcher import (
    DEFAULT_START_TIMEOUT_S,
    DEFAULT_TERM_GRACE_S,
    LAUNCHER_TAG,
    STOPPED_EXIT_CODE,
    TIMEOUT_EXIT_CODE,
    SshOptions,
    Stopper,
    launch,
    launch_elastic,
    parse_hostfile,
    parse_hosts,
)
from collective.launcher.elastic import DEFAULT_ELASTIC_TIMEOUT_S

__all__ = ["STOPPED_EXIT_CODE", "TIMEOUT_EXIT_CODE", "Stopper", "is_elastic_command", "launch", "main"]

ELASTIC_FLAGS = ("--min-np", "--max-np", "--host-discovery-script")


def main(argv: list[str] | None = None) -> int:
    """Launcher: runs the command line ``argv`` (default: this process's) and returns the job's exit code, or 2
    for a usage error."""
    argv = sys.argv[1:] if argv is None else argv
    if is_elastic_command(argv):
        return _elastic_main(argv)
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


def is_elastic_command(argv: list[str]) -> bool:
    """Whether a ``collective.run`` command line asks for elastic mode: one of ``ELASTIC_FLAGS`` before the
    script (the first ``.py`` argument; what follows is the script's own)."""
    for arg in argv:
        if arg.endswith(".py") and not arg.startswith("-"):
            return False
        if arg.split("=", 1)[0] in ELASTIC_FLAGS:
            return True
    return False


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
    _add_grace_and_script(parser, "Python script to run on every rank (or horovodrun's "
                          "'python script.py' / 'python -m module')")
    return parser


def _elastic_main(argv: list[str]) -> int:
    parser = _elastic_argument_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    min_np = args.min_np if args.min_np is not None else (args.num_proc or 1)
    max_np = args.max_np if args.max_np is not None else max(min_np, args.num_proc or min_np)
    if args.host_discovery_script is None:
        parser.print_usage(sys.stderr)
        print("elastic mode needs --host-discovery-script", file=sys.stderr)
        return 2
    if min_np > max_np:
        print(f"--min-np {min_np} is more than --max-np {max_np}", file=sys.stderr)
        return 2
    return launch_elastic([args.script, *args.script_args], args.host_discovery_script, min_np, max_np,
                          elastic_timeout_s=args.elastic_timeout, timeout_s=args.timeout,
                          term_grace_s=args.term_grace)


def _elastic_argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m collective.run",
        description="Run a Python script as an elastic collective job whose workers come and go.")
    parser.add_argument("-np", "--num-proc", dest="num_proc", type=_positive_int, default=None,
                        help="default for --min-np (and --max-np) when they are not given")
    parser.add_argument("--min-np", type=_positive_int, default=None, help="fewest workers to train with")
    parser.add_argument("--max-np", type=_positive_int, default=None, help="most workers to start")
    parser.add_argument("--host-discovery-script", metavar="S", default=None,
                        help="executable printing the available 'host:slots', one per line")
    parser.add_argument("--elastic-timeout", type=_positive_float, default=DEFAULT_ELASTIC_TIMEOUT_S,
                        metavar="S", help="how long the job may stay below --min-np workers")
    parser.add_argument("--timeout", type=_positive_float, default=None, metavar="S",
                        help=f"stop the job and exit {TIMEOUT_EXIT_CODE} after S seconds")
    _add_grace_and_script(parser, "Python script to run on every worker")
    return parser


def _add_grace_and_script(parser: argparse.ArgumentParser, script_help: str) -> None:
    """The arguments both modes end with: ``--term-grace``, the script and its arguments."""
    parser.add_argument("--term-grace", type=_positive_float, default=DEFAULT_TERM_GRACE_S,
                        metavar="S", help="seconds between SIGTERM and SIGKILL on teardown")
    parser.add_argument("script", help=script_help)
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")


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


if __name__ == "__main__":
    sys.exit(main())
