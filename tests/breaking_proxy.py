"""A real TCP proxy in front of the local server that breaks a seeded fraction of requests."""

from __future__ import annotations

import contextlib
import random
import socket
import threading


class BreakingProxy:
    """Relays TCP to the server; a seeded fraction of client requests is dropped: the connection
    is closed instead of forwarding (the client sees a broken connection, never an answer)."""

    def __init__(self, upstream: str, fraction: float, seed: int, listen_port: int = 0):
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.fraction = fraction
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.dropped = 0
        self.listener = socket.create_server(("127.0.0.1", listen_port))
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client, socket.create_connection(self.upstream) as server:
            for end in (client, server):  # relayed at once, not held back for a delayed ack
                end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pipe, args=(server, client), daemon=True).start()
            while chunk := client.recv(65536):
                with self.lock:
                    drop = chunk.startswith(b"POST") and self.random.random() < self.fraction
                    self.dropped += drop
                if drop:
                    client.shutdown(socket.SHUT_RDWR)
                    return
                server.sendall(chunk)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the accepting thread: the port stops listening
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
