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

from collective.elastic import durable
from spark_hvd.errors import CommitTooLargeError
from spark_hvd.launch import rank_events

# How long fn's end waits for the last commit to leave (a peer was lost: it is the one the next stage needs).
_FLUSH_TIMEOUT_S = 60.0


class ElasticRankCall:
    """fn, run with rank 0's commits sent to the driver and the job starting from ``initial`` (a pickled
    snapshot, or None for the state as fn builds it)."""

    def __init__(self, fn: Callable[..., Any], initial: bytes | None, max_commit_bytes: int) -> None:
        self.fn = fn
        self.initial = initial
        self.max_commit_bytes = max_commit_bytes

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        sender = CommitSender(self.max_commit_bytes)
        initial = cloudpickle.loads(self.initial) if self.initial is not None else None
        durable.install(durable.DurableCommits(sink=sender.offer, initial=initial))
        try:
            return self.fn(*args, **kwargs)
        finally:
            durable.install(None)
            sender.close(_FLUSH_TIMEOUT_S)


class CommitSender:
    """Pickles and sends the newest offered snapshot in a thread of its own."""

    def __init__(self, max_bytes: int, send: Callable[[dict[str, Any], bytes], bool] = rank_events.send_frame) -> None:
        self._max_bytes = max_bytes
        self._send = send
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
                if len(blob) > self._max_bytes:
                    raise CommitTooLargeError(
                        f"spark_hvd.run_elastic: the committed state is {len(blob)} bytes pickled, over "
                        f"max_commit_bytes={self._max_bytes} that the driver keeps in memory")
                self._send({"kind": rank_events.COMMIT_KIND, "seq": seq}, blob)
            except BaseException as error:  # noqa: BLE001 - raised at the next commit, in fn's thread
                with self._cond:
                    self._error = error
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
