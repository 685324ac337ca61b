"""Rank: what this rank saw fail, kept from the moment a collective raised, so that the launcher blames the
root cause whatever the script then does with the error.

A script may catch the collective's error and ``sys.exit``, ``os._exit`` or raise something else: no
``sys.excepthook`` runs for the first two, and the third carries no sign of the peer that failed. So the
first collective error that names another rank's failure is noted as it is raised and, under a launcher
that asked for a report file, written there at once. An exception that ends the process later writes the
report again, still marked as that reaction. ``collective.init`` starts a fresh record: an elastic job that
re-formed has left the failures it recovered from behind.

This module must stay importable without the C++ extension.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
import traceback as traceback_module
from types import TracebackType
from typing import Any, Callable, TypeVar

from collective.failures.report import FailureReport, write_report

_Call = TypeVar("_Call", bound=Callable[..., Any])

_report_path: str | None = None
_own_rank: int | None = None
_reaction: FailureReport | None = None   # the first collective error since init that names another rank's failure
_hook_installed = False


def record_failures(report_path: str | None, own_rank: int | None) -> None:
    """Starts this rank's record for a new job: reports go to ``report_path`` (None: only noted, for a rank
    child that sends its report itself) and name ``own_rank``'s peers."""
    global _report_path, _own_rank, _reaction, _hook_installed
    _report_path, _own_rank, _reaction = report_path, own_rank, None
    if report_path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(report_path)  # what an earlier job of this process reported is not this job's story
        if not _hook_installed:
            _install_excepthook()
            _hook_installed = True


def note_failure(error: BaseException) -> None:
    """Called as a collective raises ``error``: keeps it, and writes the report, if it is this rank's first
    reaction to another rank's failure."""
    global _reaction
    if _reaction is not None:
        return
    report = FailureReport.from_exception(error, _own_rank)
    if not report.peer_failure:
        return  # the rank's own error (a bad argument...): an exception that ends the process reports it
    _reaction = report
    if _report_path is not None:
        with contextlib.suppress(OSError):
            write_report(_report_path, report)


def noting_failures(call: _Call) -> _Call:
    """``call``, noting what it raises before raising it."""
    @functools.wraps(call)
    def noted(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except Exception as error:
            note_failure(error)
            raise
    return noted  # type: ignore[return-value]


class NotingCollectives:
    """Whatever runs collectives (the communicator), with each failure of its ``run`` noted."""

    def __init__(self, target: Any) -> None:
        self.run = noting_failures(target.run)


def as_noted_reaction(report: FailureReport) -> FailureReport:
    """``report`` of the exception that ends this rank, marked as a reaction to the peer failure the rank
    noted before, when it is not one already: it is a consequence (a script's ``sys.exit``, or its own error
    about the failed step), and the peer is the root cause."""
    if report.peer_failure or _reaction is None:
        return report
    return dataclasses.replace(report, peer_failure=True, blamed_rank=_reaction.blamed_rank)


def _install_excepthook() -> None:
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        path = _report_path
        if path is not None:
            try:
                text = "".join(traceback_module.format_exception(kind, error, tb))
                write_report(path, as_noted_reaction(FailureReport.from_exception(error, _own_rank, traceback=text)))
            except Exception:  # noqa: BLE001 - the report is best effort; the traceback must still print
                pass
        previous(kind, error, tb)

    sys.excepthook = hook
