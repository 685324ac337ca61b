"""Rank child: what ``spark_hvd.run_elastic`` wraps around fn: rank 0's commits go to the driver, and the
job's first ``state.sync()`` starts from the commit the driver kept from the stage before.

A commit must cost the training loop little: ``state.commit()`` only hands the snapshot (already a copy) to
a background thread, which pickles it and sends it on the report pipe to the task, which forwards it to the
driver. When commits come faster than they travel, only the newest pending one is sent.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import cloudpickle

import collective
from collective.elastic import durable
from spark_hvd.errors import CommitTooLargeError
from spark_hvd.launch.rank import rank_events
from spark_hvd.launch.stored_commits import CommitSpill, stored_path

# How long fn's end waits for the last commit to leave (a peer was lost: it is the one the next stage needs).
_FLUSH_TIMEOUT_S = 60.0


class ElasticRankCall:
    """fn, run with rank 0's commits sent to the driver and the job starting from ``initial`` (a pickled
    snapshot, a reference to one in ``spill``'s Store, or None for the state as fn builds it)."""

    def __init__(self, fn: Callable[..., Any], initial: bytes | None, max_commit_bytes: int,
                 spill: CommitSpill | None = None) -> None:
        self.fn = fn
        self.initial = initial
        self.max_commit_bytes = max_commit_bytes
        self.spill = spill

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        sender = CommitSender(self.max_commit_bytes, spill=self.spill)
        durable.install(durable.DurableCommits(sink=sender.offer, initial=self._initial_snapshot()))
        try:
            return self.fn(*args, **kwargs)
        finally:
            durable.install(None)
            sender.close(_FLUSH_TIMEOUT_S)


    def _initial_snapshot(self) -> Any:
        path = stored_path(self.initial)
        if path is None:
            return cloudpickle.loads(self.initial) if self.initial is not None else None
        if collective.rank() != 0 or self.spill is None:
            return path   # only rank 0 restores the commit (the others take it from rank 0): a marker will do
        return cloudpickle.loads(self.spill.read(self.initial))


class CommitSender:
    """Pickles and sends the newest offered snapshot in a thread of its own; one over ``max_bytes`` goes to
    ``spill``'s Store, and a reference to it to the driver."""

    def __init__(self, max_bytes: int, send: Callable[[dict[str, Any], bytes], bool] = rank_events.send_frame,
                 spill: CommitSpill | None = None) -> None:
        self._max_bytes = max_bytes
        self._send = send
        self._spill = spill
        self._cond = threading.Condition()
        self._pending: tuple[int, Any] | None = None
        self._busy = False
        self._closed = False
        self._error: BaseException | None = None
        self._seq = 0
        self._thread = threading.Thread(target=self._loop, name="spark-hvd-commit-sender", daemon=True)
        self._thread.start()

    def offer(self, snapshot: Any) -> None:
        """Queues ``snapshot`` (replacing one not yet sent); raises what sending the previous one hit."""
        with self._cond:
            if self._error is not None:
                raise self._error
            self._seq += 1
            self._pending = (self._seq, snapshot)
            self._cond.notify_all()

    def close(self, timeout_s: float) -> None:
        """Sends what is pending (up to ``timeout_s``), then stops the thread."""
        with self._cond:
            self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout_s)
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout_s)

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                (seq, snapshot), self._pending = self._pending, None
                self._busy = True
            try:
                blob = cloudpickle.dumps(snapshot)
                if len(blob) > self._max_bytes and self._spill is not None:
                    blob = self._spill.write(blob)
                elif len(blob) > self._max_bytes:
                    raise CommitTooLargeError(
                        f"spark_hvd.run_elastic: the committed state is {len(blob)} bytes pickled, over "
                        f"max_commit_bytes={self._max_bytes} that the driver keeps in memory; pass "
                        f"commit_store= (a Store every host reads) to keep larger commits there")
                self._send({"kind": rank_events.COMMIT_KIND, "seq": seq}, blob)
            except BaseException as error:  # noqa: BLE001 - raised at the next commit, in fn's thread
                with self._cond:
                    self._error = error
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
