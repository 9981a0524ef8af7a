"""A small HTTP/1.1 keep-alive server that careless or hostile clients cannot exhaust.

One event-loop thread owns every connection between requests: it accepts, reads requests as their
bytes arrive (non-blocking) and only when a request is complete hands it to a bounded pool of
worker threads, which run the handler, send the response in one send and give the connection
back. So an idle or slow connection costs a socket and a small buffer, never a thread, and:

- a request's head is checked before its body is read: a Content-Length above the limit is
  answered 413 at once, and for a body above `PRECHECK_BYTES` the handler's `precheck` (method,
  signature, instance, API: all in the headers) runs first, so an unauthenticated client cannot
  make the server buffer a large body. A trusted connection (below) skips the precheck: its
  client has shown it holds the secret, so its body (up to the limit) is read at once and the
  handler checks the whole request, answering what the precheck would have, without closing;
- a connection idle for `idle_timeout_s` is closed, and so is one whose request has not fully
  arrived within `request_timeout_s` (answered 408);
- a connection is *trusted* once the handler marked one of its requests authenticated
  (`Request.authenticated`). Until then it has `header_timeout_s` (seconds) from its opening or
  from its previous request until a request's head has arrived, so a client that sends nothing,
  or a byte at a time (slowloris), holds its slot only that long;
- at most `max_connections` are open: a new one evicts the oldest untrusted connection (idle or
  mid-request), else the longest-idle trusted one; only while every connection is a trusted one
  in the middle of a request are no more accepted. So an attacker without the secret can churn
  the table but never fill it against a client that has the secret;
- one peer address holds at most `max_untrusted_per_peer` untrusted connections: a new one
  closes that peer's oldest. Peers behind one address (every test client is 127.0.0.1) are not
  shut out by it: it is the oldest that goes, and trusted connections do not count;
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
_ACCEPT_BATCH = 64  # connections accepted per turn of the loop
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
    # Set by the handler (or the precheck) once the request proved its sender has the secret:
    # the connection is then trusted (see the module docstring).
    authenticated: bool = False


@dataclass
class Limits:
    """What one client may cost; change them on `server.limits` while the server runs."""

    max_connections: int = 512
    idle_timeout_s: float = 120.0  # a keep-alive connection between requests
    request_timeout_s: float = 60.0  # from a request's first byte until all of it has arrived
    # From a request's first byte until its head (request line, headers) has arrived; for an
    # untrusted connection from its opening or its previous request.
    header_timeout_s: float = 10.0
    max_untrusted_per_peer: int = 256
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

    __slots__ = ("active", "buf", "head", "length", "lingering", "peer", "sock", "started", "trusted")

    def __init__(self, sock: socket.socket, peer: str, now: float) -> None:
        self.sock = sock
        self.peer = peer
        self.trusted = False  # a request of it was authenticated (set by a worker)
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
        # Untrusted connections, busy ones included, oldest first (loop thread only): overall,
        # and by peer address.
        self._untrusted: dict[_Conn, None] = {}
        self._untrusted_by_peer: dict[str, dict[_Conn, None]] = {}
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
        # A bounded batch, so that connections accepted earlier get read in between: a client's
        # request is not left unread while a flood of newer connections pushes it to the front.
        for _ in range(_ACCEPT_BATCH):
            with self._lock:
                total = len(self._conns) + self._busy
            victim = None
            if total >= self.limits.max_connections:
                victim = self._victim()
                if victim is None:
                    self._listen(False)  # every connection is a trusted one mid-request: new ones wait
                    return
            try:
                sock, address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # nobody waiting: the victim stays
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE):
                    # Out of descriptors: shed a connection, or wait for the sweep.
                    victim = victim or self._victim()
                    if victim is None:
                        self._listen(False)
                    else:
                        self._drop(victim)
                    return
                raise
            if victim is not None:
                self._drop(victim)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = str(address[0]) if isinstance(address, tuple) else ""
            if len(self._untrusted_by_peer.get(peer, ())) >= self.limits.max_untrusted_per_peer:
                self._per_peer_room(peer)
            conn = _Conn(sock, peer, time.monotonic())
            with self._lock:
                self._conns[sock] = conn
            self._untrusted[conn] = None
            self._untrusted_by_peer.setdefault(peer, {})[conn] = None
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _victim(self) -> _Conn | None:
        """The connection to close to make room: the oldest untrusted one, else a trusted one that
        is closing or idle between requests (the longest idle); None when there is none."""
        victim = self._oldest(self._untrusted)
        if victim is not None:
            return victim
        closing = [c for c in self._conns.values() if c.lingering is not None]
        idle = closing or [c for c in self._conns.values() if c.started is None]
        return min(idle, key=lambda c: c.active) if idle else None

    def _oldest(self, untrusted: dict[_Conn, None]) -> _Conn | None:
        """The oldest of `untrusted` that the loop holds (not one a worker is serving)."""
        return next((c for c in untrusted if not c.trusted and self._conns.get(c.sock) is c), None)

    def _per_peer_room(self, peer: str) -> None:
        """Make room for one more untrusted connection of `peer`: close its oldest."""
        same_peer = self._untrusted_by_peer[peer]
        # A worker marks a connection trusted before it answers, and the client may connect again
        # before the loop takes the connection back: it no longer counts.
        for conn in [c for c in same_peer if c.trusted]:
            self._forget_untrusted(conn)
        if len(self._untrusted_by_peer.get(peer, ())) >= self.limits.max_untrusted_per_peer:
            oldest = self._oldest(same_peer)
            if oldest is not None:
                self._drop(oldest)

    def _forget_untrusted(self, conn: _Conn) -> None:
        if conn not in self._untrusted:
            return
        del self._untrusted[conn]
        same_peer = self._untrusted_by_peer.get(conn.peer)
        if same_peer is not None:
            same_peer.pop(conn, None)
            if not same_peer:
                del self._untrusted_by_peer[conn.peer]

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
            if length > self.max_body or (
                length > PRECHECK_BYTES and self.precheck is not None and not conn.trusted
            ):
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
            if conn.trusted:
                self._forget_untrusted(conn)
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
                late_head = conn.head is None and now - conn.started > limits.header_timeout_s
                if late_head or now - conn.started > limits.request_timeout_s:
                    self._refuse(conn, _plain(408, "request timeout"))
            elif now - conn.active > (
                limits.idle_timeout_s if conn.trusted else min(limits.idle_timeout_s, limits.header_timeout_s)
            ):
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
        self._forget_untrusted(conn)
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
            conn.trusted = conn.trusted or request.authenticated
            if refusal is None:
                return True  # the loop reads the body now
            self._send(conn, refusal, close=True)
            return False
        body = bytes(conn.buf[: conn.length])
        del conn.buf[: conn.length]
        conn.head, conn.started, conn.active = None, None, time.monotonic()
        keep_alive = _keep_alive(version, headers)
        request = Request(method, path, headers, body)
        response = self.handler(request)
        conn.trusted = conn.trusted or request.authenticated
        self._send(conn, response, close=not keep_alive)
        if conn.buf:
            conn.started = conn.active  # the next request has begun arriving
        return keep_alive

    def _send(self, conn: _Conn, response: Response, close: bool) -> None:
        status, headers, body = response
        data = _response(status, headers, body, close)
        try:
            sent = conn.sock.send(data)  # non-blocking: most responses fit the socket's buffer
        except BlockingIOError:
            sent = 0
        except OSError:
            return  # the peer went away: nothing to answer
        if sent == len(data):
            return
        conn.sock.settimeout(self.limits.write_timeout_s)
        try:
            conn.sock.sendall(memoryview(data)[sent:])
        except OSError:
            pass
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
