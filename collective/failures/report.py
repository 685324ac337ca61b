"""Every process (a rank writes it, a launcher or the Spark driver reads it): what a failed rank says about its
own failure, so that a launcher can blame the root cause.

A rank that merely noticed another rank's failure (its peer vanished, or never answered before the
deadline) is not the one that failed: its report says so and names the peer it was waiting on. A
launcher then blames the named peer, or a rank whose report is its own error, never the order in which
exits happen to be reaped. The same report travels on every path: a file under ``collective.run``, the
rank child's result pipe and the output connection under ``spark_hvd.run``. A rank writes it as a
collective raises and as an exception ends it (collective.failures.notes).

This module must stay importable without the C++ extension (the launchers read reports).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import traceback as traceback_module
from dataclasses import dataclass
from typing import Any, Mapping

_SUMMARY_LIMIT = 1000
# How torch.distributed reports a peer that went away: gloo's TCP pairs raise a plain RuntimeError with
# the first three; NCCL's DistBackendError (a RuntimeError) carries the last. They name no rank.
_TORCH_PEER_LOST = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "remote process exited or there was a network error",
)
# How long a launcher waits for the root cause's own report once it has heard only a reaction to it (or,
# under Spark, only that the job failed): a dying rank's report can trail its peers' by a moment.
REPORT_LAG_S = 3.0
# Errors wrap errors (``raise RunFailed(...) from e``); a reaction stays a reaction however deep.
_CHAIN_DEPTH = 8


@dataclass(frozen=True)
class FailureReport:
    """One rank's account of its failure."""

    summary: str                     # one line, e.g. "ValueError: boom"
    traceback: str | None = None
    peer_failure: bool = False       # a reaction to another rank's failure, not a root cause
    blamed_rank: int | None = None   # the peer it was waiting on when it noticed, when known
    stage: str | None = None         # what the rank was doing, when not the user's code
    # False when a retry cannot help (bad input, a non-finite loss): the error's class says so with a
    # ``retryable = False`` attribute. An elastic driver re-forms after the others (spark_hvd.run_elastic).
    retryable: bool = True
    exception: bytes | None = None   # the exception itself, pickled by the rank when it could be (small ones)

    @classmethod
    def from_exception(cls, error: BaseException, own_rank: int | None, stage: str | None = None,
                       traceback: str | None = None) -> "FailureReport":
        summary = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        if stage is not None:
            summary = f"{summary} (while {stage})"
        if len(summary) > _SUMMARY_LIMIT:
            summary = summary[:_SUMMARY_LIMIT] + "..."
        blamed = blamed_peer(error, own_rank)
        return cls(summary=summary, traceback=traceback if traceback is not None else _format(error),
                   peer_failure=blamed is not None or is_peer_failure(error), blamed_rank=blamed, stage=stage,
                   retryable=bool(getattr(error, "retryable", True)))

    def to_wire(self) -> dict[str, Any]:
        return {"summary": self.summary, "traceback": self.traceback, "peer_failure": self.peer_failure,
                "blamed_rank": self.blamed_rank, "stage": self.stage, "retryable": self.retryable,
                "exception": None if self.exception is None else base64.b64encode(self.exception).decode("ascii")}

    @classmethod
    def from_wire(cls, fields: Mapping[str, Any]) -> "FailureReport":
        """Tolerant of a torn or older report: every field is checked for its type, never trusted."""
        blamed = fields.get("blamed_rank")
        stage = fields.get("stage")
        traceback = fields.get("traceback")
        return cls(summary=str(fields.get("summary") or "failed"),
                   traceback=traceback if isinstance(traceback, str) and traceback else None,
                   peer_failure=bool(fields.get("peer_failure")),
                   blamed_rank=blamed if isinstance(blamed, int) and not isinstance(blamed, bool) else None,
                   stage=stage if isinstance(stage, str) else None,
                   retryable=fields.get("retryable") is not False, exception=_decoded(fields.get("exception")))


def _decoded(text: Any) -> bytes | None:
    if not isinstance(text, str):
        return None
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        return None


def is_peer_failure(error: BaseException) -> bool:
    """Whether ``error`` (or an error it wraps) only reacts to another rank's failure."""
    from_native = _native_errors()
    for link in _chain(error):
        if from_native is not None and isinstance(link, from_native[0]):
            return True
        if isinstance(link, RuntimeError) and any(text in str(link) for text in _TORCH_PEER_LOST):
            return True
    return False


def blamed_peer(error: BaseException, own_rank: int | None) -> int | None:
    """The peer a PeerFailureError or a timeout in ``error``'s chain names, unless it names this rank."""
    from_native = _native_errors()
    if from_native is None:
        return None
    for link in _chain(error):
        if isinstance(link, from_native):
            rank = getattr(link, "rank", None)
            if isinstance(rank, int) and rank >= 0 and rank != own_rank:
                return rank
    return None


def root_cause(first: int, waiting_on: Mapping[int, int | None]) -> int:
    """The rank at the end of "rank r was waiting on rank b" links, starting from the first failing rank.

    ``waiting_on`` maps each rank whose report is a reaction to the peer it names (None when it names
    none). In a ring, rank 0 may time out on a stopped rank 2 while rank 1 times out on rank 0: both
    reactions lead to rank 2, the one that reported nothing of the kind.
    """
    rank, seen = first, {first}
    while (peer := waiting_on.get(rank)) is not None and peer not in seen:
        seen.add(peer)
        rank = peer
    return rank


def write_report(path: str, report: FailureReport) -> None:
    """Writes atomically: a launcher that reads while the rank dies sees all of it or nothing."""
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(report.to_wire(), f)
    os.replace(partial, path)


def read_report(path: str) -> FailureReport | None:
    try:
        with open(path, encoding="utf-8") as f:
            fields = json.load(f)
    except (OSError, ValueError):
        return None
    return FailureReport.from_wire(fields) if isinstance(fields, dict) else None


def _chain(error: BaseException) -> list[BaseException]:
    links: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and len(links) < _CHAIN_DEPTH and link not in links:
        links.append(link)
        link = link.__cause__ or link.__context__
    return links


def _native_errors() -> tuple[type[BaseException], type[BaseException]] | None:
    # Imported lazily: a launcher reading reports must not need the extension.
    module = sys.modules.get("collective._native")
    if module is None:
        return None
    return module.PeerFailureError, module.CollectiveTimeoutError


def _format(error: BaseException) -> str:
    return "".join(traceback_module.format_exception(type(error), error, error.__traceback__))
