"""Careless or hostile clients on raw sockets (127.0.0.1 only, bounded loops): large bodies are
refused from their headers, idle and slow connections time out, connections are capped, and none
of it costs a thread per connection or memory per announced byte."""

from __future__ import annotations

import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from urllib.parse import urlparse

import pytest
from rawhttp import read_response
from tablestore import OTSClient, OTSServiceError, Row
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local.testing import LocalTablestore, local_tablestore

MiB = 1024 * 1024


@pytest.fixture
def ots() -> Iterator[LocalTablestore]:
    """A server of the test's own: these tests change its limits and fill its connections."""
    with local_tablestore(memory=True) as running:
        yield running


def connect(ots: LocalTablestore) -> socket.socket:
    url = urlparse(ots.endpoint)
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    return sock


def head(api: str, length: int, **headers: str) -> bytes:
    lines = [f"POST /{api} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {length}"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def error_code(body: bytes) -> str:
    return pb.Error.FromString(body).code


def eventually(condition: Callable[[], bool], within_s: float = 30.0) -> bool:
    """Poll `condition` (a generous bound: this checks that it happens, not how fast)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.01)
    try:
        return sock.recv(65536) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_an_oversized_body_is_refused_from_its_headers_before_it_is_sent(ots: LocalTablestore) -> None:
    with connect(ots) as sock:
        sock.sendall(head("PutRow", 64 * MiB))  # and not one byte of the body
        status, body = read_response(sock)
        assert (status, error_code(body)) == (413, "OTSRequestBodyTooLarge")


def test_a_large_unsigned_body_is_refused_before_it_is_read(ots: LocalTablestore) -> None:
    with connect(ots) as sock:
        sock.sendall(head("PutRow", 4 * MiB))  # under the limit, but no signature
        status, body = read_response(sock)
        assert (status, error_code(body)) == (400, "OTSParameterInvalid")


def test_a_large_body_with_a_wrong_signature_is_answered_through_the_sdk(ots: LocalTablestore) -> None:
    client = OTSClient(ots.endpoint, ots.access_key_id, "not-the-secret", ots.instance)
    with pytest.raises(OTSServiceError) as info:
        client.put_row("t", Row([("id", 1)], [("v", "x" * MiB)]))
    assert (info.value.get_error_code(), info.value.get_error_message()) == (
        "OTSAuthFailed", "Signature mismatch."
    )
    assert ots.client().list_table() == ()  # the server serves on


def test_pre_auth_connections_announcing_64_mib_cost_no_memory(ots: LocalTablestore) -> None:
    chunk = b"\0" * (256 * 1024)
    tracemalloc.start()
    try:
        socks = [connect(ots) for _ in range(10)]
        for sock in socks:
            sock.sendall(head("PutRow", 64 * MiB) + chunk)
        answers = [read_response(sock)[0] for sock in socks]
        for sock in socks:  # clients that go on sending after the answer
            try:
                for _ in range(4):
                    sock.sendall(chunk)
            except OSError:
                pass  # the server closed the connection: it did not buffer the body
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        for sock in socks:
            sock.close()
    assert answers == [413] * 10
    assert peak < 32 * MiB, f"traced peak {peak / MiB:.0f} MiB"


@pytest.mark.slow
def test_idle_connections_cost_no_thread_and_are_closed(ots: LocalTablestore) -> None:
    http = ots.server._http
    ots.client().list_table()  # warm up: the worker pool has started a thread
    before = threading.active_count()
    socks = [connect(ots) for _ in range(200)]
    try:
        assert eventually(lambda: http.open_connections >= 200)
        assert threading.active_count() - before <= 1
        ots.server.limits.idle_timeout_s = 0.2
        assert eventually(lambda: all(closed_by_server(s) for s in socks))
        assert eventually(lambda: http.open_connections == 0)
    finally:
        for sock in socks:
            sock.close()
    assert ots.client().list_table() == ()


def test_connections_are_capped_and_a_new_client_is_still_served(ots: LocalTablestore) -> None:
    ots.server.limits.max_connections = 20
    socks = [connect(ots) for _ in range(60)]
    try:
        assert ots.client().list_table() == ()  # gets in: the longest-idle connections make room
        assert ots.server._http.open_connections <= 20
    finally:
        for sock in socks:
            sock.close()


@pytest.mark.slow
def test_a_slow_request_times_out(ots: LocalTablestore) -> None:
    ots.server.limits.request_timeout_s = 0.5
    with connect(ots) as slow, connect(ots) as slow_body:
        slow.sendall(b"POST /ListTable HTTP/1.1\r\nHost: x\r\n")  # the head never ends
        slow_body.sendall(head("ListTable", 100) + b"x")  # 1 of 100 bytes
        assert read_response(slow)[0] == 408
        assert read_response(slow_body)[0] == 408
        assert eventually(lambda: closed_by_server(slow) and closed_by_server(slow_body))
    assert ots.client().list_table() == ()
