"""The SDK's requests over kept-alive HTTP connections, without urllib3's layers.

The SDK sends every request through urllib3's ``PoolManager.urlopen``: a URL parsed and a pool
looked up per request, ``Retry`` and ``Timeout`` objects, the connection taken from and put back
in a locked queue, headers written one ``putheader`` at a time, the answer's headers parsed by
the ``email`` package into an ``HTTPMessage``, then an ``HTTPHeaderDict``, then a dict. Measured
against the local server, one small request through ``RawClient.call`` took 430-670 µs of client
CPU that way and 170-260 µs this way (capture makes ~135 requests per 4000 stream records).

``KeptAlive`` stands in for the SDK's ``ConnectionPool``: ``send_receive(url, headers, body)``
gives ``(status, reason, headers, body)`` as urllib3 did (header names as sent, a repeated one's
values joined by ", "), which the SDK's ``protocol`` then checks as before (MD5, date, response
signature). A request takes the idle connection used last, or opens one as urllib3's pool opens
it (``HTTPConnectionPool._new_conn``: the same timeout, TLS settings, certificate checks and
socket options), writes the request as urllib3 writes it (the same request line and headers)
and reads the answer itself: status line, headers, a ``Content-Length``, chunked or
to-the-end body, gzip or deflate content decoded as urllib3 decodes it.

What urllib3 did that stays as it was:

- A connection that cannot be opened (refused, no such host, a TLS handshake that fails, a
  timeout): the request goes through the SDK's pool instead, so urllib3's own connection
  retries and its errors (``NewConnectionError``, ``MaxRetryError`` ...) are exactly as before,
  and ``tsmigrate.instance.retry`` judges them as before.
- A kept connection the server closed meanwhile (or that holds bytes nobody asked for) is
  noticed before a request is written on it, closed and replaced.
- A request that fails once sent raises what urllib3 raises for a POST then (it never sends a
  POST twice itself): ``ReadTimeoutError`` for an answer that does not come in time,
  ``SSLError`` for TLS, ``ProtocolError`` ("Connection aborted.") for the rest; the retry
  policy above takes them as before.
- ``pool.clear()`` closes the kept connections too; connections are closed when the client is
  collected; as many are kept idle as the SDK's pool would keep (``max_connection``).

A connection belongs to the process that opened it: after a fork the child opens its own.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import http.client
import os
import re
import select
import socket
import threading
import weakref
import zlib
from typing import Any

import urllib3
from urllib3.exceptions import ProtocolError, ReadTimeoutError, SSLError

try:
    import ssl

    _SSL_ERRORS: tuple[type[BaseException], ...] = (ssl.SSLError, ssl.CertificateError)
except ImportError:  # pragma: no cover - a Python without ssl
    _SSL_ERRORS = ()

_MAX_LINE = 65536  # as http.client
_MAX_HEADERS = 100
_generation = 0  # changes in a forked child: connections of the parent are not used there


def _forked() -> None:
    global _generation
    _generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class _Connection:
    """A kept connection: urllib3's connection object (which opened the socket)."""

    __slots__ = ("__weakref__", "closed", "conn", "generation", "poller", "sock", "stale", "tls")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sock = conn.sock
        self.tls = hasattr(self.sock, "cipher")
        self.poller = select.poll()
        self.poller.register(self.sock, select.POLLIN)
        self.generation = _generation
        self.stale = False  # to be closed once its request is done (``KeptAlive.close_kept``)
        self.closed = False

    def usable(self) -> bool:
        """Open, of this process, and not readable while no request is out on it (a server
        that closed it, or sent what nobody asked for)."""
        if self.closed or self.stale or self.generation != _generation:
            return False
        try:
            if self.tls and self.sock.pending():
                return False
            return not self.poller.poll(0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(OSError):
                self.conn.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class _Pools:
    """What ``KeptAlive.pool`` gives: the SDK's ``PoolManager``, whose ``clear`` closes the kept
    connections too."""

    def __init__(self, owner: KeptAlive) -> None:
        self._owner = owner

    def clear(self) -> None:
        self._owner.close_kept()
        self._owner.inner.pool.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._owner.inner.pool, name)


class KeptAlive:
    """The SDK's ``ConnectionPool`` (``inner``) with its requests sent as described above."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.host = inner.host
        self.path = inner.path
        self._idle: collections.deque[_Connection] = collections.deque()  # newest last
        # Closed once this is collected (the client in a reference cycle, too), as urllib3's pool
        weakref.finalize(self, _close_idle, self._idle)
        # As many kept idle as the SDK's pool keeps (its ``maxsize``); more are closed
        self._most_idle = int(inner.pool.connection_pool_kw.get("maxsize") or 1)
        self._kept: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._origin: Any = None  # urllib3's pool for the endpoint: opens the connections
        self._fixed = b""  # the request head's lines every request has (Host, Accept-Encoding)

    # -- the SDK's interface ---------------------------------------------------------------------

    def send_receive(self, url: str, request_headers: dict[str, str], request_body: bytes) -> Any:
        kept = self._connection()
        if kept is None:  # could not be opened here: as the SDK would, with urllib3's retries
            return self.inner.send_receive(url, request_headers, request_body)
        try:
            status, reason, headers, body, ends = self._exchange(
                kept, self.path + url, request_headers, request_body)
        except BaseException:
            kept.close()
            raise
        if ends or kept.stale or len(self._idle) >= self._most_idle:
            kept.close()
        else:
            self._idle.append(kept)
        return status, reason, headers, body

    @property
    def pool(self) -> _Pools:
        return _Pools(self)

    def close_kept(self) -> None:
        """Close the kept connections: idle ones now, one with a request out once it is done.
        The next requests open new ones."""
        with self._lock:
            kept = list(self._kept)
        for connection in kept:
            connection.stale = True  # one taken for a request is closed after it
        _close_idle(self._idle)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # -- connections -----------------------------------------------------------------------------

    def _connection(self) -> _Connection | None:
        """The idle connection used last (the others may time out at the server), or a new one;
        None when none could be opened."""
        idle = self._idle
        while idle:
            try:
                kept = idle.pop()  # atomic: no two requests take the same one
            except IndexError:
                break
            if kept.usable():
                return kept
            kept.close()
        try:
            origin = self._origin
            if origin is None:
                origin = self.inner.pool.connection_from_url(self.host)
                self._fixed = _fixed_head(origin)
                self._origin = origin
            conn = origin._new_conn()  # as urllib3's pool opens one: timeout, TLS, socket options
        except Exception:
            return None  # urllib3 tries again, and says what went wrong
        try:
            conn.connect()
            kept = _Connection(conn)
        except Exception:
            conn.close()
            return None
        with self._lock:
            self._kept.add(kept)
        return kept

    # -- one request -----------------------------------------------------------------------------

    def _exchange(self, kept: _Connection, target: str, headers: dict[str, str],
                  body: bytes) -> tuple[int, str, dict[str, str], bytes, bool]:
        head = _head(self._fixed, target, headers, len(body))
        sock = kept.sock
        try:  # as urllib3's ``_make_request`` sends a request, then reads its answer
            if len(body) < 65536 or kept.tls:
                sock.sendall(head + body)
            else:  # a large body is not copied to be sent with its head
                _sendmsg_all(sock, [head, body])
        except BrokenPipeError:
            pass  # the server may have answered and closed: its answer is read
        except _SSL_ERRORS as exc:
            raise SSLError(exc) from exc
        except OSError as exc:
            if exc.errno not in (errno.EPROTOTYPE, errno.ECONNRESET):
                raise ProtocolError("Connection aborted.", exc) from exc
        try:
            return _read_answer(sock)
        except TimeoutError as exc:
            raise ReadTimeoutError(self._origin, target,
                                   f"Read timed out. (read timeout={sock.gettimeout()})") from exc
        except _SSL_ERRORS as exc:
            if "timed out" in str(exc):
                raise ReadTimeoutError(self._origin, target,
                                       f"Read timed out. (read timeout={sock.gettimeout()})") from exc
            raise SSLError(exc) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise ProtocolError("Connection aborted.", exc) from exc


def _close_idle(idle: collections.deque[_Connection]) -> None:
    while True:
        try:
            connection = idle.pop()
        except IndexError:
            return
        connection.close()


def _fixed_head(origin: Any) -> bytes:
    """The lines of a request's head that are the same for every request: Host (as
    http.client writes it) and Accept-Encoding."""
    host = origin.host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    default = 443 if origin.scheme == "https" else 80
    host_header = host if origin.port in (None, default) else f"{host}:{origin.port}"
    line = f"Host: {host_header}\r\nAccept-Encoding: identity\r\n"
    return line.encode("ascii") if line.isascii() else line.encode("idna")


def _head(fixed: bytes, target: str, headers: dict[str, str], length: int) -> bytes:
    lines = [f"POST {target} HTTP/1.1\r\n".encode("ascii"), fixed]
    if "User-Agent" not in headers and not any(name.lower() == "user-agent" for name in headers):
        lines.append(f"User-Agent: {urllib3.connection._get_default_user_agent()}\r\n".encode("latin-1"))
    lines.append(b"Content-Length: %d\r\n" % length)
    text = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
    if text.count("\n") != len(headers) or "\r" in text.replace("\r\n", ""):
        raise ValueError("a request header holds a line break")
    lines += (text.encode("latin-1"), b"\r\n")
    return b"".join(lines)


def _sendmsg_all(sock: socket.socket, parts: list[bytes]) -> None:
    views = [memoryview(p) for p in parts]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        if views and sent:
            views[0] = views[0][sent:]


class _Incoming:
    """What a socket received for one answer and was not read yet: the head is found in the
    first bytes, the body taken as the length says (no more is asked of the socket than the
    answer holds, so bytes left after it mean the server sent what nobody asked for)."""

    __slots__ = ("buf", "pos", "sock")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.buf = b""
        self.pos = 0

    def _more(self) -> None:
        chunk = self.sock.recv(_CHUNK)
        if not chunk:
            raise http.client.RemoteDisconnected("Remote end closed connection without response")
        self.buf = self.buf[self.pos:] + chunk if self.pos < len(self.buf) else chunk
        self.pos = 0

    def until(self, mark: bytes, limit: int, what: str) -> bytes:
        """The bytes up to and including ``mark`` (at most ``limit`` of them)."""
        while True:
            end = self.buf.find(mark, self.pos)
            if end >= 0:
                end += len(mark)
                found = self.buf[self.pos:end]
                self.pos = end
                if len(found) > limit:
                    raise http.client.LineTooLong(what)
                return found
            if len(self.buf) - self.pos > limit:
                raise http.client.LineTooLong(what)
            self._more()

    def exactly(self, size: int) -> bytes:
        have = len(self.buf) - self.pos
        if have >= size:
            found = self.buf[self.pos:self.pos + size] if self.pos or have > size else self.buf
            self.pos += size
            return found
        parts = [self.buf[self.pos:]] if have else []
        self.buf, self.pos = b"", 0
        need = size - have
        while need > 0:
            chunk = self.sock.recv(min(need, _LARGEST_RECV))
            if not chunk:
                got = b"".join(parts)
                raise http.client.IncompleteRead(got, need)
            parts.append(chunk)
            need -= len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def to_end(self) -> bytes:
        parts = [self.buf[self.pos:]]
        self.buf, self.pos = b"", 0
        while chunk := self.sock.recv(_CHUNK):
            parts.append(chunk)
        return b"".join(parts)

    def left(self) -> bool:
        return self.pos < len(self.buf)


_CHUNK = 65536
_LARGEST_RECV = 1 << 20
_MAX_HEAD = _MAX_LINE * 4


def _read_answer(sock: Any) -> tuple[int, str, dict[str, str], bytes, bool]:
    """Status, reason, headers (as urllib3's ``dict(response.headers)``: names as sent, repeated
    ones joined by ", "), the body, and whether the connection ends with this answer."""
    incoming = _Incoming(sock)
    while True:
        text = incoming.until(b"\r\n\r\n", _MAX_HEAD, "answer head").decode("latin-1")
        first = text.index("\r\n")
        if first > _MAX_LINE:
            raise http.client.LineTooLong("status line")
        version, status, reason = _status(text[:first])
        headers, lowered = _headers(text[first + 2:])
        if status != 100:  # 100 Continue: its (empty) headers skipped, the answer follows
            break
    connection = lowered.get("connection", "").lower()
    closes = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection)
    encoding = lowered.get("transfer-encoding", "").lower()
    if status < 200 or status in (204, 304):
        body = b""
    elif encoding and encoding != "identity":
        if encoding != "chunked":
            raise http.client.HTTPException(f"unsupported transfer encoding {encoding!r}")
        body = _read_chunked(incoming)
    elif "content-length" in lowered:
        try:
            length = int(lowered["content-length"].split(",")[0])
        except ValueError:
            raise http.client.HTTPException("invalid Content-Length") from None
        if length < 0:
            raise http.client.HTTPException("invalid Content-Length")
        body = incoming.exactly(length)
    else:  # to the end of the stream
        body = incoming.to_end()
        closes = True
    coding = lowered.get("content-encoding", "").lower().strip()
    if coding and coding != "identity":
        body = _decoded(body, coding)
    return status, reason, headers, body, closes or incoming.left()


def _status(line: str) -> tuple[str, int, str]:
    try:
        version, status_text, reason = [*line.split(" ", 2), ""][:3]
        status = int(status_text)
    except ValueError:
        raise http.client.BadStatusLine(repr(line)) from None
    if not version.startswith("HTTP/") or not 100 <= status <= 999:
        raise http.client.BadStatusLine(repr(line))
    return version, status, reason


# A header line as the service writes them: a name, a colon, the value
_HEADER_LINE = re.compile(r"^([^:\r\n \t][^:\r\n]*):[ \t]*([^\r\n]*?)[ \t]*\r\n", re.M)


def _headers(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """The header lines of a head (after its status line, up to the empty line): by name as
    sent (a name sent twice: its values joined by ", ", as urllib3's ``HTTPHeaderDict``), and
    by lower-cased name."""
    pairs = _HEADER_LINE.findall(text)
    lines = text.count("\r\n") - 1
    if lines > _MAX_HEADERS:
        raise http.client.HTTPException(f"got more than {_MAX_HEADERS} headers")
    if len(pairs) == lines:  # every line plain
        lowered = {name.lower(): value for name, value in pairs}
        if len(lowered) == len(pairs):
            return dict(pairs), lowered
    headers: dict[str, str] = {}
    names: dict[str, str] = {}  # lower-cased name -> the name as first sent
    last = None
    for line in text.split("\r\n")[:-2]:
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong("header line")
        if line[:1] in (" ", "\t") and last is not None:  # a folded line continues the last value
            headers[last] = headers[last] + " " + line.strip()
            continue
        name, colon, value = line.partition(":")
        if not colon:
            raise http.client.HTTPException(f"malformed header line {line!r}")
        value = value.strip(" \t")
        key = name.lower()
        if key in names:
            name = names[key]
            value = headers[name] + ", " + value
        else:
            names[key] = name
        headers[name] = value
        last = name
    return headers, {name.lower(): value for name, value in headers.items()}


def _read_chunked(incoming: _Incoming) -> bytes:
    parts = []
    while True:
        line = incoming.until(b"\r\n", _MAX_LINE, "chunk size")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise http.client.IncompleteRead(b"".join(parts)) from None
        if size == 0:
            break
        parts.append(incoming.exactly(size))
        if incoming.exactly(2) != b"\r\n":
            raise http.client.IncompleteRead(b"".join(parts))
    while incoming.until(b"\r\n", _MAX_LINE, "trailer") != b"\r\n":  # trailers, to the empty line
        pass
    return b"".join(parts)


def _decoded(body: bytes, coding: str) -> bytes:
    """What urllib3 makes of a gzip or deflate body."""
    from urllib3.exceptions import DecodeError

    try:
        if coding in ("gzip", "x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if coding == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)
    except zlib.error as exc:
        raise DecodeError(f"Received response with content-encoding: {coding}, but failed to decode it.",
                          exc) from exc
    raise DecodeError(f"Received response with content-encoding {coding!r}, which is not decoded here")


def adopt(client: Any) -> Any:
    """Send ``client``'s requests through ``KeptAlive``: the SDK's own ``ConnectionPool`` at the
    bottom of its connection (under any wrappers: retries, guards, pacing, a test's stand-in)
    is replaced; a client without one is left as it is. Returns the client."""
    from tablestore.connection import ConnectionPool

    parent, attribute = client, "connection"
    node = getattr(client, "connection", None)
    for _ in range(16):  # wrappers hold what they wrap as ``inner`` or ``_connection``
        if isinstance(node, KeptAlive):
            return client  # adopted before
        if type(node) is ConnectionPool:
            setattr(parent, attribute, KeptAlive(node))
            return client
        found = vars(node) if hasattr(node, "__dict__") else {}
        for name in ("inner", "_connection"):
            if found.get(name) is not None:
                parent, attribute, node = node, name, found[name]
                break
        else:
            return client
    return client
