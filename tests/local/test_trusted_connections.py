"""Large requests (above `transport.PRECHECK_BYTES`) on raw sockets: an untrusted connection's are
checked from their headers before the body is read; a trusted connection's (one of its requests
was authenticated) skip that check, a worker hand-off less, and are still refused when their
signature is wrong, with the same answer."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest
from rawhttp import read_response
from tablestore import CapacityUnit, Condition, OTSClient, ReservedThroughput, Row, TableMeta, TableOptions
from tablestore.auth import RequestContext
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local.auth import Credentials
from tsmigrate.local.context import ServerOptions
from tsmigrate.local.server import LocalServer
from tsmigrate.local.transport import PRECHECK_BYTES, Request, Response

KEY_ID, SECRET, INSTANCE = "local", "local-secret", "local"


class CountingServer(LocalServer):
    """Counts the transport's prechecks: each is a worker hand-off before the body is read."""

    prechecks = 0

    def precheck(self, req: Request) -> Response | None:
        self.prechecks += 1
        return super().precheck(req)


@pytest.fixture
def server() -> Iterator[CountingServer]:
    running = CountingServer(Credentials({KEY_ID: SECRET}), options=ServerOptions(instances={INSTANCE}))
    running.start()
    try:
        client = OTSClient(running.endpoint, KEY_ID, SECRET, INSTANCE)
        client.create_table(TableMeta("t", [("id", "INTEGER")]), TableOptions(),
                            ReservedThroughput(CapacityUnit(0, 0)))
        running.prechecks = 0
        yield running
    finally:
        running.close()


def request(server: LocalServer, api: str, *args: object, secret: str = SECRET) -> tuple[bytes, bytes]:
    """The head and body of a keep-alive request as the SDK signs it (with `secret`)."""
    client = OTSClient(server.endpoint, KEY_ID, secret, INSTANCE)
    context = RequestContext(client.credentials_provider.get_credentials())
    query, headers, body = client.protocol.make_request(api, client._signer, context, *args)
    lines = [f"POST {query} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode(), body


def put_row(server: LocalServer, key: int, size: int, secret: str = SECRET) -> tuple[bytes, bytes]:
    head, body = request(server, "PutRow", "t", Row([("id", key)], [("v", "x" * size)]),
                         Condition("IGNORE"), None, None, secret=secret)
    assert len(body) > PRECHECK_BYTES or size < PRECHECK_BYTES
    return head, body


def connect(server: LocalServer) -> socket.socket:
    url = urlparse(server.endpoint)
    return socket.create_connection((url.hostname, url.port), timeout=10)


def answer(sock: socket.socket) -> tuple[int, str, str]:
    status, body = read_response(sock)
    if status == 200:
        return status, "", ""
    error = pb.Error.FromString(body)
    return status, error.code, error.message


def nothing_answered(sock: socket.socket, wait_s: float = 0.3) -> bool:
    sock.settimeout(wait_s)
    try:
        sock.recv(1)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(10)
    return False


def trusted_connection(server: LocalServer) -> socket.socket:
    sock = connect(server)
    head, body = request(server, "ListTable")
    sock.sendall(head + body)
    assert answer(sock)[0] == 200
    return sock


WRONG_SECRET = (403, "OTSAuthFailed", "Signature mismatch.")


def test_an_untrusted_connection_large_body_is_refused_from_its_headers(server: CountingServer) -> None:
    head, _ = put_row(server, 1, 100_000, secret="not-the-secret")
    with connect(server) as sock:
        sock.sendall(head)  # not one byte of the body
        assert answer(sock) == WRONG_SECRET
    assert server.prechecks == 1
    # A well-signed one is prechecked too, then read and served.
    head, body = put_row(server, 1, 100_000)
    with connect(server) as sock:
        sock.sendall(head)
        assert nothing_answered(sock)  # accepted from its headers: the body is awaited
        sock.sendall(body)
        assert answer(sock)[0] == 200
    assert server.prechecks == 2


def test_a_trusted_connection_large_request_skips_the_precheck(server: CountingServer) -> None:
    with trusted_connection(server) as sock:
        for key in range(3):
            head, body = put_row(server, key, 100_000)
            sock.sendall(head + body)
            assert answer(sock)[0] == 200
    assert server.prechecks == 0
    client = OTSClient(server.endpoint, KEY_ID, SECRET, INSTANCE)
    _, row, _ = client.get_row("t", [("id", 2)], max_version=1)
    assert row.attribute_columns[0][1] == "x" * 100_000


def test_a_trusted_connection_large_request_with_a_wrong_signature_is_refused(
    server: CountingServer,
) -> None:
    with trusted_connection(server) as sock:
        head, body = put_row(server, 7, 100_000, secret="not-the-secret")
        sock.sendall(head)
        assert nothing_answered(sock)  # read in full before it is judged
        sock.sendall(body)
        assert answer(sock) == WRONG_SECRET  # as the precheck answers an untrusted connection
        # The framing held: the connection serves on (and stays trusted).
        head, body = put_row(server, 8, 100_000)
        sock.sendall(head + body)
        assert answer(sock)[0] == 200
    assert server.prechecks == 0
    client = OTSClient(server.endpoint, KEY_ID, SECRET, INSTANCE)
    assert client.get_row("t", [("id", 7)], max_version=1)[1] is None
    # Above the body limit, a trusted connection is still refused from its headers.
    with trusted_connection(server) as sock:
        head, _ = put_row(server, 9, 6 * 1024 * 1024)
        sock.sendall(head)
        assert answer(sock)[:2] == (413, "OTSRequestBodyTooLarge")
