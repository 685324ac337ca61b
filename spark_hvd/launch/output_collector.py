"""Driver: the receiving end of the output connections: prints every rank's lines as they arrive, keeps the
last few per rank for error messages, and turns connections and failure reports into events."""

from __future__ import annotations

import collections
import hmac
import secrets
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Union

from collective.run import LineSink
from spark_hvd.errors import RankFailure
from spark_hvd.launch.framing import FrameError, read_frame
from spark_hvd.launch.output_channel import (
    CLIENT_HELLO_BYTES,
    KIND_EVENT,
    KIND_FAILURE,
    KIND_LINE,
    KIND_NOTICE,
    NONCE_BYTES,
    auth_digest,
    parse_client_hello,
    recv_exactly,
    server_hello,
)

_HANDSHAKE_TIMEOUT_S = 30.0
_MAX_FRAME_BLOB_BYTES = 0  # output frames carry everything in the header
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


CollectorEvent = Union[RankConnected, RankFailed, RankEvent]


class OutputCollector:
    """A TCP server for the ranks' OutputSenders. Thread per connection; ranks are few."""

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
        bind_host: str = "0.0.0.0",
        timestamps: bool = False,
    ) -> None:
        """``timestamps``: prefix every echoed rank line with the driver's local time, as Horovod's
        ``prefix_output_with_timestamp`` does (``time.asctime()`` right before ``[rank]``)."""
        self._secret = secret
        self._num_ranks = num_ranks
        self._on_event = on_event
        self._sinks = {"stdout": stdout, "stderr": stderr}
        self._echo = echo
        self._timestamps = timestamps
        self._bind_host = bind_host
        self._lock = threading.Lock()
        self._tails = {r: collections.deque(maxlen=tail_lines) for r in range(num_ranks)}
        self._connected: set[int] = set()
        self._open: dict[int, socket.socket] = {}
        self._all_closed = threading.Condition(self._lock)
        self._accept_thread: threading.Thread | None = None
        self._conn_threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._wake_reader, self._wake_writer = socket.socketpair()

    def start(self) -> int:
        """Starts listening; returns the port."""
        listener = socket.create_server((self._bind_host, 0))
        listener.setblocking(False)
        self._listener = listener
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name="spark-hvd-collector", daemon=True)
        self._accept_thread.start()
        return listener.getsockname()[1]

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
        self._wake_writer.send(b"x")
        with self._lock:
            conns = list(self._open.values())
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        # The accept loop first, so the list of connection threads no longer grows.
        if self._accept_thread is not None:
            self._accept_thread.join(join_timeout_s)
        for thread in self._conn_threads:
            thread.join(join_timeout_s)
        if self._listener is not None:
            self._listener.close()
        self._wake_reader.close()
        self._wake_writer.close()

    def __enter__(self) -> "OutputCollector":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_reader, selectors.EVENT_READ)
            while not self._stopping.is_set():
                for key, _ in selector.select():
                    if key.fileobj is self._wake_reader:
                        return
                    try:
                        conn, _ = self._listener.accept()
                    except (BlockingIOError, InterruptedError):
                        continue
                    conn.setblocking(True)
                    thread = threading.Thread(target=self._serve, args=(conn,),
                                              name="spark-hvd-collector-conn", daemon=True)
                    thread.start()
                    self._conn_threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        rank = None
        try:
            rank = self._handshake(conn)
            if rank is None:
                return
            stream = conn.makefile("rb")
            while True:
                frame = read_frame(stream, max_blob_bytes=_MAX_FRAME_BLOB_BYTES)
                if frame is None:
                    return
                self._handle(rank, frame[0])
        except (OSError, FrameError):
            return  # A task that dies mid-frame is reported by Spark; nothing to add here.
        finally:
            with self._lock:
                if rank is not None and self._open.get(rank) is conn:
                    del self._open[rank]
                    self._all_closed.notify_all()
            conn.close()

    def _handshake(self, conn: socket.socket) -> int | None:
        conn.settimeout(_HANDSHAKE_TIMEOUT_S)
        nonce = secrets.token_bytes(NONCE_BYTES)
        conn.sendall(server_hello(nonce))
        rank, digest = parse_client_hello(recv_exactly(conn, CLIENT_HELLO_BYTES))
        valid = 0 <= rank < self._num_ranks and hmac.compare_digest(
            digest, auth_digest(self._secret, nonce, rank))
        with self._lock:
            # One connection per rank: a second one is a stray retry or an impostor.
            accepted = valid and rank not in self._connected and not self._stopping.is_set()
            if accepted:
                self._connected.add(rank)
                self._open[rank] = conn
        conn.sendall(b"\x01" if accepted else b"\x00")
        if not accepted:
            return None
        conn.settimeout(None)
        self._on_event(RankConnected(rank))
        return rank

    def _handle(self, rank: int, header: dict) -> None:
        kind = header.get("kind")
        if kind == KIND_LINE:
            text = str(header.get("text", ""))
            stream = "stderr" if header.get("stream") == "stderr" else "stdout"
            with self._lock:
                self._tails[rank].append(text)
            if self._echo:
                stamp = time.asctime() if self._timestamps else ""
                self._sinks[stream].write_line(f"{stamp}[{rank}]: ".encode(), text.encode("utf-8", "replace"))
        elif kind == KIND_NOTICE:
            self._sinks["stderr"].write_line(
                f"{DRIVER_TAG} rank {rank}: ".encode(), str(header.get("text", "")).encode("utf-8", "replace"))
        elif kind == KIND_EVENT:
            data = header.get("data")
            self._on_event(RankEvent(rank, data if isinstance(data, dict) else {}))
        elif kind == KIND_FAILURE:
            self._on_event(RankFailed(RankFailure.from_wire(rank, header)))
