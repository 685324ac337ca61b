"""Driver: the receiving end of the output connections: prints every rank's lines as they arrive, keeps the
last few per rank for error messages, and turns connections and failure reports into events."""

from __future__ import annotations

import collections
import hmac
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Union

from collective.bootstrap.listener import (
    ADMIT,
    DEFAULT_HANDSHAKE_TIMEOUT_S,
    DEFAULT_MAX_PENDING,
    Handshake,
    HandshakeRefused,
    Listener,
)
from collective.launcher import LineSink
from collective.launcher.output_prefix import rank_line_prefix
from spark_hvd.errors import RankFailure
from spark_hvd.launch.framing import FrameError, read_frame
from spark_hvd.launch.task.output_channel import (
    CLIENT_HELLO_BYTES,
    KIND_COMMIT,
    KIND_EVENT,
    KIND_FAILURE,
    KIND_LINE,
    KIND_NOTICE,
    NONCE_BYTES,
    auth_digest,
    parse_client_hello,
    server_hello,
)

DRIVER_TAG = "[spark_hvd]"


@dataclass(frozen=True)
class RankConnected:
    rank: int


@dataclass(frozen=True)
class RankFailed:
    failure: RankFailure


@dataclass(frozen=True)
class RankEvent:
    rank: int
    data: dict


@dataclass(frozen=True)
class RankCommitted:
    """Rank 0's ``state.commit()`` under run_elastic: ``blob`` is the pickled snapshot, opaque to the driver."""
    rank: int
    seq: int
    blob: bytes


CollectorEvent = Union[RankConnected, RankFailed, RankEvent, RankCommitted]


class OutputCollector:
    """A TCP server for the ranks' OutputSenders, on the shared Listener: strangers are handshaken
    concurrently under a short deadline and never get a thread; each authenticated rank gets one."""

    def __init__(
        self,
        secret: bytes,
        num_ranks: int,
        on_event: Callable[[CollectorEvent], None],
        stdout: LineSink,
        stderr: LineSink,
        *,
        echo: bool = True,
        tail_lines: int = 20,
        bind_host: str = "127.0.0.1",
        port: int = 0,
        timestamps: bool = False,
        handshake_timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S,
        max_pending: int = DEFAULT_MAX_PENDING,
        max_commit_bytes: int = 0,
    ) -> None:
        """``timestamps``: prefix every echoed rank line with the driver's local time, as Horovod's
        ``prefix_output_with_timestamp`` does (``time.asctime()`` right before ``[rank]``).
        ``bind_host``: the address the ranks dial (the driver's bind address under Spark); ``port``: 0, any free one.
        ``max_commit_bytes``: the largest commit a rank may send (run_elastic); 0, none (other frames have no blob)."""
        self._max_blob_bytes = max_commit_bytes
        self._secret = secret
        self._num_ranks = num_ranks
        self._on_event = on_event
        self._sinks = {"stdout": stdout, "stderr": stderr}
        self._echo = echo
        self._timestamps = timestamps
        self._lock = threading.Lock()
        self._tails = {r: collections.deque(maxlen=tail_lines) for r in range(num_ranks)}
        self._connected: set[int] = set()
        self._open: dict[int, socket.socket] = {}
        self._all_closed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._listener = Listener(
            bind_host, port, self._handshake, self._serve, name="spark_hvd output collector",
            handshake_timeout_s=handshake_timeout_s, max_pending=max_pending, max_peers=max(1, num_ranks))

    def start(self) -> int:
        """Starts listening; returns the port."""
        return self._listener.start()[1]

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) as bound; valid after start()."""
        return self._listener.address

    def tail(self, rank: int) -> list[str]:
        with self._lock:
            return list(self._tails.get(rank, ()))

    def connected_ranks(self) -> set[int]:
        with self._lock:
            return set(self._connected)

    def wait_until_all_closed(self, timeout_s: float) -> bool:
        """Waits until every rank that connected has closed, i.e. sent all its output."""
        with self._all_closed:
            return self._all_closed.wait_for(lambda: not self._open, timeout_s)

    def stop(self, join_timeout_s: float = 5.0) -> None:
        """Closes every connection; tasks still running take that as the order to stop."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._listener.stop(join_timeout_s)

    def __enter__(self) -> "OutputCollector":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def replay(self, rank: int, frames: list[dict]) -> None:
        """Handles the frames a rank carried in its stage row (StageOutbox) instead of a connection,
        as if they had arrived on one: lines printed and kept for errors, events and failures raised."""
        if not 0 <= rank < self._num_ranks:
            raise ValueError(f"stage output for rank {rank}, outside 0..{self._num_ranks - 1}")
        with self._lock:
            self._connected.add(rank)
        self._on_event(RankConnected(rank))
        for header in frames:
            self._handle(rank, header)

    def _handshake(self, conn: socket.socket) -> Handshake:
        """The driver's side of the handshake, driven by the Listener (fixed sizes only)."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        yield server_hello(nonce)
        rank, digest = parse_client_hello((yield CLIENT_HELLO_BYTES))
        valid = 0 <= rank < self._num_ranks and hmac.compare_digest(
            digest, auth_digest(self._secret, nonce, rank))
        accepted = False
        if valid and (yield ADMIT):
            with self._lock:
                # One connection per rank: a second one is a stray retry or an impostor.
                accepted = rank not in self._connected and not self._stopping.is_set()
                if accepted:
                    self._connected.add(rank)
                    self._open[rank] = conn
        if not accepted:
            yield b"\x00"
            raise HandshakeRefused(f"refused a connection for rank {rank}")
        try:
            yield b"\x01"
        except GeneratorExit:
            # The verdict never reached the task, which will retry: the rank is not connected.
            with self._lock:
                self._connected.discard(rank)
                self._open.pop(rank, None)
                self._all_closed.notify_all()
            raise
        return rank

    def _serve(self, conn: socket.socket, rank: int) -> None:
        """An authenticated rank's frames, in its own thread, until it closes or stop()."""
        try:
            self._on_event(RankConnected(rank))
            stream = conn.makefile("rb")
            while True:
                frame = read_frame(stream, max_blob_bytes=self._max_blob_bytes)
                if frame is None:
                    return
                self._handle(rank, frame[0], frame[1])
        except (OSError, FrameError):
            return  # A task that dies mid-frame is reported by Spark; nothing to add here.
        finally:
            with self._lock:
                if self._open.get(rank) is conn:
                    del self._open[rank]
                    self._all_closed.notify_all()

    def _handle(self, rank: int, header: dict, blob: bytes = b"") -> None:
        kind = header.get("kind")
        if kind == KIND_LINE:
            text = str(header.get("text", ""))
            stream = "stderr" if header.get("stream") == "stderr" else "stdout"
            with self._lock:
                self._tails[rank].append(text)
            if self._echo:
                stamp = time.asctime() if self._timestamps else ""
                self._sinks[stream].write_line(rank_line_prefix(rank, stream, stamp), text.encode("utf-8", "replace"))
        elif kind == KIND_NOTICE:
            self._sinks["stderr"].write_line(
                f"{DRIVER_TAG} rank {rank}: ".encode(), str(header.get("text", "")).encode("utf-8", "replace"))
        elif kind == KIND_EVENT:
            data = header.get("data")
            self._on_event(RankEvent(rank, data if isinstance(data, dict) else {}))
        elif kind == KIND_FAILURE:
            self._on_event(RankFailed(RankFailure.from_wire(rank, header)))
        elif kind == KIND_COMMIT and blob:
            self._on_event(RankCommitted(rank, int(header.get("seq", 0)), blob))
