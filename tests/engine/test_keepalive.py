"""The SDK's requests over kept-alive connections (tsmigrate.instance.keepalive): the answers are
the ones urllib3 gives, connections are kept and opened again as they should be, and what goes
wrong raises what urllib3 raises."""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
import time
import zlib
from collections.abc import Callable

import pytest
import urllib3.exceptions
from tablestore import OTSClient
from tablestore.auth import RequestContext
from tablestore.connection import ConnectionPool
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.instance import keepalive, retry
from tsmigrate.instance.pacing import PacedConnection, Pacer
from tsmigrate.instance.rawclient import RawClient


def _kept(client: OTSClient) -> keepalive.KeptAlive:
    node = client.connection
    while not isinstance(node, keepalive.KeptAlive):
        node = vars(node).get("inner") or vars(node)["_connection"]
    return node


def _signed(client: OTSClient, api: str, body: bytes) -> dict[str, str]:
    context = RequestContext(client.credentials_provider.get_credentials())
    return client.protocol._make_request_headers(body, "/" + api, client._signer, context)


def test_answers_are_urllib3s_and_connections_are_kept(ots_instance) -> None:
    client = retry.install(ots_instance.client())
    kept = _kept(client)
    body = pb.ListTableRequest().SerializeToString()
    for api, request in (("ListTable", body), ("DescribeTable", pb.DescribeTableRequest(
            table_name="nothing_here").SerializeToString())):
        headers = _signed(client, api, request)
        ours = kept.send_receive("/" + api, headers, request)
        theirs = kept.inner.send_receive("/" + api, headers, request)
        assert ours[:2] == theirs[:2]
        assert set(ours[2]) == set(theirs[2])
        assert ours[3] == theirs[3] or api == "ListTable"  # another test may add tables
        assert {k: v for k, v in ours[2].items() if k.lower() in ("content-type", "x-ots-contenttype")} \
            == {k: v for k, v in theirs[2].items() if k.lower() in ("content-type", "x-ots-contenttype")}
    raw = RawClient(client)
    for _ in range(5):
        raw.call("ListTable", body, pb.ListTableResponse)
    assert len(kept._idle) == 1  # one connection, used again and again


def test_the_sdk_pool_is_replaced_under_any_wrapper_and_stand_ins_are_left() -> None:
    client = OTSClient("http://127.0.0.1:1", "id", "secret", "instance")
    client.connection = PacedConnection(client.connection, Pacer(5))
    retry.install(client)
    assert isinstance(client.connection, retry.RetryingConnection)
    assert isinstance(client.connection.inner._connection, keepalive.KeptAlive)
    retry.install(client)  # once only
    assert isinstance(client.connection.inner._connection.inner, ConnectionPool)

    class StandIn:
        def send_receive(self, url, headers, body):
            return 200, "OK", {}, b""

    other = OTSClient("http://127.0.0.1:1", "id", "secret", "instance")
    other.connection = StandIn()
    assert isinstance(keepalive.adopt(other).connection, StandIn)


# -- a scripted server -------------------------------------------------------------------------


class Scripted:
    """A server answering each request it reads with the next of ``answers`` (raw bytes, or a
    callable given the connection to do what it likes); counts the connections it accepted."""

    def __init__(self, answers: list[bytes | Callable[[socket.socket], None]]) -> None:
        self.answers = list(answers)
        self.accepted = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:  # an answer may close it
            self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        data = b""
        while self.answers:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, data = data.partition(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            while len(data) < length:
                data += conn.recv(65536)
            self.requests.append(head + b"\r\n\r\n" + data[:length])
            data = data[length:]
            answer = self.answers.pop(0)
            if callable(answer):
                answer(conn)
            else:
                conn.sendall(answer)

    def close(self) -> None:
        self.listener.close()


def _answer(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    lines = [f"HTTP/1.1 {status}", *headers]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@pytest.fixture
def scripted():
    servers: list[Scripted] = []

    def make(*answers, timeout: float = 5) -> tuple[Scripted, keepalive.KeptAlive]:
        server = Scripted(list(answers))
        servers.append(server)
        pool = ConnectionPool(f"http://127.0.0.1:{server.port}", "", timeout=timeout, maxsize=4)
        return server, keepalive.KeptAlive(pool)

    yield make
    for server in servers:
        server.close()


def _send(kept: keepalive.KeptAlive, body: bytes = b"request") -> tuple:
    return kept.send_receive("/ListTable", {"x-ots-date": "d", "User-Agent": "test"}, body)


def test_the_request_is_written_as_urllib3_writes_it(scripted) -> None:
    server, kept = scripted(_answer(b"ok"))
    assert _send(kept, b"\x00body") == (200, "OK", {"Content-Length": "2"}, b"ok")
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /ListTable HTTP/1.1"
    assert set(lines[1:]) == {f"Host: 127.0.0.1:{server.port}".encode(), b"Accept-Encoding: identity",
                              b"Content-Length: 5", b"x-ots-date: d", b"User-Agent: test"}
    assert body == b"\x00body"
    with pytest.raises(ValueError):
        kept.send_receive("/ListTable", {"x-ots-date": "d\r\nInjected: 1"}, b"")


def test_answers_of_every_shape_are_read(scripted) -> None:
    big = bytes(range(256)) * 4000
    chunked = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n"
    server, kept = scripted(
        _answer(big, "X-Ots-Requestid: 1"),
        _answer(chunked, "Transfer-Encoding: chunked"),
        _answer(gzip.compress(b"zipped"), "Content-Encoding: gzip"),
        _answer(zlib.compress(b"deflated"), "Content-Encoding: deflate"),
        _answer(b"", "Set-Thing: a", "set-thing: b", "Folded: one", "  two"),
        b"HTTP/1.1 100 Continue\r\n\r\n" + _answer(b"after"),
        _answer(b"gone", status="404 Not Found"),
        _answer(b"", status="204 No Content"),
    )
    assert _send(kept)[3] == big
    assert _send(kept)[3] == b"hello world"
    assert _send(kept)[3] == b"zipped"
    assert _send(kept)[3] == b"deflated"
    headers = _send(kept)[2]
    assert headers["Set-Thing"] == "a, b" and headers["Folded"] == "one two"
    assert _send(kept)[3] == b"after"
    assert _send(kept)[:2] == (404, "Not Found")
    assert _send(kept)[3] == b""
    assert server.accepted == 1


def test_a_connection_the_server_ends_is_not_used_again(scripted) -> None:
    def answer_and_close(conn: socket.socket) -> None:
        conn.sendall(_answer(b"bye"))
        conn.shutdown(socket.SHUT_RDWR)

    server, kept = scripted(
        _answer(b"one", "Connection: close"),
        _answer(b"two"),
        answer_and_close,  # closed without saying so: seen closed before the next request
        _answer(b"four"),
        _answer(b"five") + b"HTTP/1.1 200 OK\r\n",  # more than was asked for
        _answer(b"six"),
    )
    assert [_send(kept)[3] for _ in range(6)] == [b"one", b"two", b"bye", b"four", b"five", b"six"]
    assert server.accepted == 4


def test_failures_once_sent_raise_what_urllib3_raises_for_a_post(scripted) -> None:
    def cut_short(conn: socket.socket) -> None:
        conn.sendall(_answer(b"0123456789")[:-4])
        conn.close()

    def silent(conn: socket.socket) -> None:
        conn.close()

    def garbage(conn: socket.socket) -> None:
        conn.sendall(b"SMTP ready\r\n\r\n")

    _server, kept = scripted(cut_short, silent, garbage, _answer(b"fine"))
    for _ in range(3):
        with pytest.raises(urllib3.exceptions.ProtocolError):
            _send(kept)
    assert _send(kept)[3] == b"fine"
    assert not retry.rejected(urllib3.exceptions.ProtocolError("Connection aborted.", OSError()))


def test_an_answer_that_does_not_come_is_a_read_timeout(scripted) -> None:
    server, kept = scripted(lambda conn: time.sleep(1), timeout=0.2)
    with pytest.raises(urllib3.exceptions.ReadTimeoutError) as caught:
        _send(kept)
    assert caught.value.pool.port == server.port


def test_an_endpoint_that_cannot_be_reached_fails_as_through_urllib3() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]  # closed again: nothing listens there
    pool = ConnectionPool(f"http://127.0.0.1:{port}", "", timeout=1, maxsize=4)
    kept = keepalive.KeptAlive(pool)
    with pytest.raises(urllib3.exceptions.MaxRetryError) as ours:
        _send(kept)
    with pytest.raises(urllib3.exceptions.MaxRetryError) as theirs:
        pool.send_receive("/ListTable", {"User-Agent": "test"}, b"request")
    assert type(ours.value.reason) is type(theirs.value.reason)
    assert retry.rejected(ours.value)


def test_clearing_the_pool_and_forking_leave_no_kept_connection(scripted) -> None:
    server, kept = scripted(*[_answer(b"x")] * 4)
    _send(kept)
    kept.pool.clear()
    _send(kept)
    assert server.accepted == 2
    keepalive._forked()  # as in a child process: the parent's connections are not used there
    _send(kept)
    assert server.accepted == 3
    _send(kept)
    assert server.accepted == 3


def test_requests_in_parallel_each_take_their_own_connection(scripted) -> None:
    def slow(conn: socket.socket) -> None:
        time.sleep(0.2)
        conn.sendall(_answer(b"slow"))

    server, kept = scripted(slow, slow, _answer(b"x"), _answer(b"x"))
    threads = [threading.Thread(target=_send, args=(kept,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert server.accepted == 2
    assert len(kept._idle) == 2
    _send(kept)
    _send(kept)
    assert server.accepted == 2
