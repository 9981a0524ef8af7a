"""A small HTTP/1.1 keep-alive server that careless or hostile clients cannot exhaust.

One event-loop thread owns every connection between requests: it accepts, reads requests as their
bytes arrive (non-blocking) and only when a request is complete hands it to a bounded pool of
worker threads, which run the handler, send the response in one send and give the connection
back. So an idle or slow connection costs a socket and a small buffer, never a thread, and:

- a request's head is checked before its body is read: a Content-Length above the limit is
  answered 413 at once, and for a body above `PRECHECK_BYTES` the handler's `precheck` (method,
  signature, instance, API: all in the headers) runs first, so an unauthenticated client cannot
  make the server buffer a large body;
- a connection idle for `idle_timeout_s` is closed, and so is one whose request has not fully
  arrived within `request_timeout_s` (answered 408);
- at most `max_connections` are open: a new one evicts the longest-idle connection, and while
  every connection is in the middle of a request no more are accepted;
- a refused request's connection is closed after its answer, discarding (not buffering) whatever
  the client still sends for a short while, so it reads the answer rather than a reset.

`http.server` is avoided: it writes headers and body in separate sends, which with Nagle and
delayed ACK stalls every keep-alive request by ~40 ms, and it needs a thread per connection.
This module only frames requests and responses; what they mean is the handler's business.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 64 * 1024
# Bodies above this size are read only once the handler's precheck accepted the headers.
PRECHECK_BYTES = 64 * 1024
_RECV = 256 * 1024
_SWEEP_S = 0.25
_LISTEN = object()  # selector data of the listening socket

_REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    411: "Length Required",
    413: "Request Entity Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    body_too_large: bool = False  # the body was not read: it announced more than the limit


@dataclass
class Limits:
    """What one client may cost; change them on `server.limits` while the server runs."""

    max_connections: int = 512
    idle_timeout_s: float = 120.0  # a keep-alive connection between requests
    request_timeout_s: float = 60.0  # from a request's first byte until all of it has arrived
    write_timeout_s: float = 60.0  # sending one response
    linger_s: float = 2.0  # discarding input after a refusal, before closing
    workers: int = 32  # threads running handlers (read when the server is created)


Response = tuple[int, list[tuple[str, str]], bytes]
Handler = Callable[[Request], Response]
# Called with a request whose body has not been read (body_too_large set when it announces more
# than the limit): a response refuses it, None lets the body be read.
Precheck = Callable[[Request], "Response | None"]


class _Conn:
    """A connection while the event loop owns it, and the request it is receiving."""

    __slots__ = ("active", "buf", "head", "length", "lingering", "sock", "started")

    def __init__(self, sock: socket.socket, now: float) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.head: tuple[str, str, str, dict[str, str]] | None = None
        self.length = 0
        self.started: float | None = None  # when the current request's first byte arrived
        self.active = now  # last time a request completed or the connection opened
        self.lingering: float | None = None  # deadline of a close after a refusal


class HTTPServer:
    """Serve `handler` on (host, port); port 0 picks a free port (see `.port`)."""

    def __init__(
        self,
        host: str,
        port: int,
        handler: Handler,
        max_body: int,
        precheck: Precheck | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.handler = handler
        self.precheck = precheck
        self.max_body = max_body
        self.limits = limits or Limits()
        self._sock = socket.create_server((host, port), backlog=128, reuse_port=False)
        self._sock.setblocking(False)
        self.host, self.port = self._sock.getsockname()[:2]
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._conns: dict[socket.socket, _Conn] = {}  # owned by the loop (not in a worker)
        self._busy = 0  # connections a worker holds
        self._returned: list[_Conn] = []  # given back by workers, for the loop to pick up
        self._lock = threading.Lock()
        self._accepting = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(self.limits.workers, thread_name_prefix="ots-worker")

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._conns) + self._busy

    def start(self) -> None:
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._listen(True)
        self._thread = threading.Thread(target=self._loop, name="ots-loop", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed = True
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._sock.close()
        for conn in [*self._conns.values(), *self._returned]:
            self._drop(conn)
        with contextlib.suppress(OSError):
            self._sel.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- the event loop ---------------------------------------------------------------------------

    def _loop(self) -> None:
        next_sweep = time.monotonic() + _SWEEP_S
        while not self._closed:
            try:
                events = self._sel.select(timeout=_SWEEP_S)
            except OSError:
                if self._closed:
                    return
                raise
            for key, _ in events:
                if key.data is None:
                    with contextlib.suppress(OSError):
                        os.read(self._wake_r, 4096)
                elif key.data is _LISTEN:
                    self._accept()
                else:
                    self._readable(key.data)
            self._take_returned()
            now = time.monotonic()
            if now >= next_sweep:
                self._sweep(now)
                next_sweep = now + _SWEEP_S

    def _listen(self, on: bool) -> None:
        if on and not self._accepting:
            self._sel.register(self._sock, selectors.EVENT_READ, _LISTEN)
        elif not on and self._accepting:
            self._sel.unregister(self._sock)
        self._accepting = on

    def _accept(self) -> None:
        while True:
            with self._lock:
                total = len(self._conns) + self._busy
            if total >= self.limits.max_connections and not self._evict_idle():
                self._listen(False)  # every connection is mid-request: let new ones wait
                return
            try:
                sock, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE):
                    # Out of descriptors: shed an idle connection, or wait for the sweep.
                    if not self._evict_idle():
                        self._listen(False)
                    return
                raise
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock, time.monotonic())
            with self._lock:
                self._conns[sock] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _evict_idle(self) -> bool:
        """Close the longest-idle connection between requests; False when there is none."""
        idle = [c for c in self._conns.values() if c.started is None and c.lingering is None]
        if not idle:
            return False
        self._drop(min(idle, key=lambda c: c.active))
        return True

    def _readable(self, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(_RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn)
            return
        if conn.lingering is not None:
            return  # refused: discard what the client still sends
        if conn.started is None:
            conn.started = time.monotonic()
        conn.buf += chunk
        self._advance(conn)

    def _advance(self, conn: _Conn) -> None:
        """Parse what has arrived; hand a complete request to a worker."""
        if conn.head is None:
            end = conn.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(conn.buf) > MAX_HEADER_BYTES:
                    self._refuse(conn, _plain(431, "header too large"))
                return
            head = _parse_head(bytes(conn.buf[:end]))
            del conn.buf[: end + 4]
            if head is None:
                self._refuse(conn, _plain(400, "malformed request"))
                return
            headers = head[3]
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._refuse(conn, _plain(411, "length required"))
                return
            try:
                length = int(headers.get("content-length", "0"))
                if length < 0:
                    raise ValueError(length)
            except ValueError:
                self._refuse(conn, _plain(400, "bad content-length"))
                return
            conn.head, conn.length = head, length
            if length > self.max_body or (length > PRECHECK_BYTES and self.precheck is not None):
                # Decided from the headers alone, before the body is read; in a worker, since a
                # handler may take its time.
                self._hand_over(conn, precheck=True)
                return
        if len(conn.buf) >= conn.length:
            self._hand_over(conn, precheck=False)

    def _hand_over(self, conn: _Conn, precheck: bool) -> None:
        self._sel.unregister(conn.sock)
        with self._lock:
            del self._conns[conn.sock]
            self._busy += 1
        self._pool.submit(self._work, conn, precheck)

    def _take_returned(self) -> None:
        with self._lock:
            returned, self._returned = self._returned, []
        for conn in returned:
            with self._lock:
                self._busy -= 1
                if self._closed:
                    conn.sock.close()
                    continue
                self._conns[conn.sock] = conn
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)
            if conn.lingering is None and conn.buf:
                self._advance(conn)  # pipelined bytes, or a body that may already be complete
        if returned and not self._accepting:
            self._listen(True)

    def _sweep(self, now: float) -> None:
        limits = self.limits
        for conn in list(self._conns.values()):
            if conn.lingering is not None:
                if now >= conn.lingering:
                    self._drop(conn)
            elif conn.started is not None:
                if now - conn.started > limits.request_timeout_s:
                    self._refuse(conn, _plain(408, "request timeout"))
            elif now - conn.active > limits.idle_timeout_s:
                self._drop(conn)
        if not self._accepting:
            with self._lock:
                room = len(self._conns) + self._busy < limits.max_connections
            if room:
                self._listen(True)

    def _refuse(self, conn: _Conn, response: bytes) -> None:
        """Answer (best effort, without blocking) and close after a short linger."""
        with contextlib.suppress(OSError):
            conn.sock.send(response)
        self._linger(conn)

    def _linger(self, conn: _Conn) -> None:
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_WR)
        conn.lingering = time.monotonic() + self.limits.linger_s
        conn.buf = bytearray()

    def _drop(self, conn: _Conn) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._sel.unregister(conn.sock)
        with self._lock:
            self._conns.pop(conn.sock, None)
        conn.sock.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    # -- workers ----------------------------------------------------------------------------------

    def _work(self, conn: _Conn, precheck: bool) -> None:
        try:
            keep = self._serve_one(conn, precheck)
        except Exception:
            log.exception("serving a connection")
            keep = False
        if not keep:
            self._linger(conn)
        with self._lock:
            self._returned.append(conn)
        self._wake()

    def _serve_one(self, conn: _Conn, precheck: bool) -> bool:
        """Run the handler (or the precheck) on the connection's request; whether it stays open."""
        assert conn.head is not None
        method, path, version, headers = conn.head
        if precheck:
            too_large = conn.length > self.max_body
            request = Request(method, path, headers, b"", too_large)
            refusal = self.precheck(request) if self.precheck is not None else None
            if refusal is None and too_large:
                refusal = self.handler(request)
            if refusal is None:
                return True  # the loop reads the body now
            self._send(conn, refusal, close=True)
            return False
        body = bytes(conn.buf[: conn.length])
        del conn.buf[: conn.length]
        conn.head, conn.started, conn.active = None, None, time.monotonic()
        keep_alive = _keep_alive(version, headers)
        self._send(conn, self.handler(Request(method, path, headers, body)), close=not keep_alive)
        if conn.buf:
            conn.started = conn.active  # the next request has begun arriving
        return keep_alive

    def _send(self, conn: _Conn, response: Response, close: bool) -> None:
        status, headers, body = response
        conn.sock.settimeout(self.limits.write_timeout_s)
        try:
            conn.sock.sendall(_response(status, headers, body, close))
        except OSError:
            pass  # the peer went away: nothing to answer
        finally:
            conn.sock.setblocking(False)


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


def _plain(status: int, text: str) -> bytes:
    return _response(status, [("Content-Type", "text/plain")], text.encode(), close=True)
