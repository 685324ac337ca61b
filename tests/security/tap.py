"""A man in the middle: a forwarding proxy in front of a listener. It keeps a copy of what each client sent
first, so a test can replay a real rank's handshake without knowing the secret, and it can reset the
first connections it is given, as a hostile network would."""

from __future__ import annotations

import socket
import struct
import threading

from strangers import ANSWER_BYTES

AT_ONCE = "at once"              # reset as soon as accepted
AFTER_ANSWER = "after the answer"  # pass the challenge along, then reset instead of passing the answer


def reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class Tap:
    def __init__(self, target: tuple[str, int], resets: tuple[str, ...] = ()) -> None:
        self.target = target
        self.answers: list[bytes] = []  # each forwarded connection's first ANSWER_BYTES from the client
        self.resets_done = 0
        self._resets = list(resets)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            how = self._resets.pop(0) if self._resets else None
            if how == AT_ONCE:
                reset(client)
                self.resets_done += 1
                continue
            server = socket.create_connection(self.target, timeout=30)
            server.settimeout(None)
            with self._lock:
                self._sockets += [client, server]
            for src, dst, upstream in ((client, server, True), (server, client, False)):
                cut = upstream and how == AFTER_ANSWER
                thread = threading.Thread(target=self._forward, args=(src, dst, upstream, cut), daemon=True)
                thread.start()
                self._threads.append(thread)

    def _forward(self, src: socket.socket, dst: socket.socket, upstream: bool, cut: bool) -> None:
        seen = bytearray()
        try:
            while data := src.recv(65536):
                if upstream and len(seen) < ANSWER_BYTES:
                    seen += data
                    if len(seen) >= ANSWER_BYTES:
                        if cut:
                            reset(src)
                            self.resets_done += 1
                            return
                        with self._lock:
                            self.answers.append(bytes(seen[:ANSWER_BYTES]))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        # shutdown() wakes the threads blocked in accept() and recv(); close() alone would not.
        with self._lock:
            for s in [self._server, *self._sockets]:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
        for thread in self._threads:
            thread.join(timeout=10)
