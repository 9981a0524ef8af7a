"""A small threaded HTTP/1.1 keep-alive server: one thread per connection, one send per response.

`http.server` writes headers and body in separate sends, which with Nagle and delayed ACK stalls
every keep-alive request by ~40 ms; it is also several times slower to parse. This module only
frames requests and responses; what they mean is the handler's business.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

MAX_HEADER_BYTES = 64 * 1024
# Bodies above the handler's limit are still drained (so the client reads our answer rather than a
# reset), up to this size; beyond it the connection is closed after answering.
MAX_DRAIN_BYTES = 64 * 1024 * 1024

_REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    413: "Request Entity Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    body_too_large: bool = False


Response = tuple[int, list[tuple[str, str]], bytes]
Handler = Callable[[Request], Response]


class HTTPServer:
    """Serve `handler` on (host, port); port 0 picks a free port (see `.port`)."""

    def __init__(self, host: str, port: int, handler: Handler, max_body: int) -> None:
        self.handler = handler
        self.max_body = max_body
        self._sock = socket.create_server((host, port), backlog=128, reuse_port=False)
        self.host, self.port = self._sock.getsockname()[:2]
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._accept_loop, name="ots-accept", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        self._sock.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if self._closed:
                    return
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._serve_requests(conn)
        except OSError:
            pass  # the peer went away; nothing to answer
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _serve_requests(self, conn: socket.socket) -> None:
        buf = b""
        while not self._closed:
            end = buf.find(b"\r\n\r\n")
            while end < 0:
                if len(buf) > MAX_HEADER_BYTES:
                    conn.sendall(_plain(400, "header too large", close=True))
                    return
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
                end = buf.find(b"\r\n\r\n")
            head, buf = buf[:end], buf[end + 4 :]
            parsed = _parse_head(head)
            if parsed is None:
                conn.sendall(_plain(400, "malformed request", close=True))
                return
            method, path, version, headers = parsed
            try:
                length = int(headers.get("content-length", "0"))
                if length < 0:
                    raise ValueError(length)
            except ValueError:
                conn.sendall(_plain(400, "bad content-length", close=True))
                return
            if "chunked" in headers.get("transfer-encoding", ""):
                conn.sendall(_plain(411, "length required", close=True))
                return
            too_large = length > self.max_body
            if too_large and length > MAX_DRAIN_BYTES:
                status, out_headers, body = self.handler(Request(method, path, headers, b"", True))
                conn.sendall(_response(status, out_headers, body, close=True))
                return
            body, buf = _read_body(conn, buf, length)
            if body is None:
                return
            keep_alive = _keep_alive(version, headers)
            req = Request(method, path, headers, b"" if too_large else body, too_large)
            status, out_headers, out_body = self.handler(req)
            conn.sendall(_response(status, out_headers, out_body, close=not keep_alive))
            if not keep_alive:
                return


def _read_body(conn: socket.socket, buf: bytes, length: int) -> tuple[bytes | None, bytes]:
    if len(buf) >= length:
        return buf[:length], buf[length:]
    body = bytearray(length)
    view = memoryview(body)
    have = len(buf)
    view[:have] = buf
    while have < length:
        n = conn.recv_into(view[have:], length - have)
        if n == 0:
            return None, b""
        have += n
    return bytes(body), b""


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]] | None:
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, path, version = lines[0].split(" ")
    except ValueError:
        return None
    if not version.startswith("HTTP/1."):
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            return None
        headers[name.strip().lower()] = value.strip()
    return method, path, version, headers


def _keep_alive(version: str, headers: dict[str, str]) -> bool:
    connection = headers.get("connection", "").lower()
    if version == "HTTP/1.0":
        return connection == "keep-alive"
    return connection != "close"


def _response(status: int, headers: list[tuple[str, str]], body: bytes, close: bool) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}"]
    lines.extend(f"{k}: {v}" for k, v in headers)
    lines.append(f"Content-Length: {len(body)}")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _plain(status: int, text: str, close: bool) -> bytes:
    return _response(status, [("Content-Type", "text/plain")], text.encode(), close)
