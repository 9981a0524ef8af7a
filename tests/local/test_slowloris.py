"""Slowloris without credentials (raw sockets on 127.0.0.1 only, bounded loops, all closed in
`finally`): connections that send a byte and stall, or send nothing, cannot shut out a client
that has the secret. The server keeps accepting, cuts a head that has not arrived within the
header deadline, caps the untrusted connections of one peer address, and when its connection
table is full closes the oldest untrusted connections first."""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from tablestore import OTSClient
from tablestore.retry import NoRetryPolicy
from test_hostile_clients import closed_by_server, connect, eventually, head, read_response

from tsmigrate.local.testing import LocalTablestore, local_tablestore

ATTACKERS = 520  # above the default table of 512 connections
CALLS = 40
CALL_TIMEOUT_S = 5.0  # per SDK call, no retries: a shut-out client fails, it does not wait 60 s


@pytest.fixture
def ots() -> Iterator[LocalTablestore]:
    """A server of the test's own: these tests fill its connections."""
    with local_tablestore(memory=True) as running:
        yield running


@pytest.fixture
def descriptors() -> Iterator[None]:
    """Room for the attack's sockets and the server's ends of them in this one process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * ATTACKERS + 1024
    if soft >= wanted:
        yield
        return
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"needs {wanted} file descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def legit_client(ots: LocalTablestore) -> OTSClient:
    return ots.client(socket_timeout=CALL_TIMEOUT_S, retry_policy=NoRetryPolicy())


def successes(calls: int, client: OTSClient | None, ots: LocalTablestore, within_s: float) -> int:
    """ListTable `calls` times (on `client`, or each on a new client: a new connection), until
    `within_s` has passed; how many succeeded."""
    deadline = time.monotonic() + within_s
    ok = 0
    for _ in range(calls):
        if time.monotonic() > deadline:
            break
        with contextlib.suppress(Exception):
            (client or legit_client(ots)).list_table()
            ok += 1
    return ok


class Slowloris:
    """`count` connections (`open`) that each send one byte of a request and stall; with `reopen`, a
    thread replaces every one the server closes (bounded by `max_reopens` and `stop`)."""

    def __init__(self, ots: LocalTablestore, count: int) -> None:
        self.ots = ots
        self.socks: list[socket.socket] = []
        self.reopened = 0
        self.max_reopens = 50 * count
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._count = count

    def open(self) -> None:
        for _ in range(self._count):
            self.socks.append(self._open())

    def _open(self) -> socket.socket:
        sock = connect(self.ots)
        sock.sendall(b"P")
        return sock

    def reopen(self) -> None:
        self._thread = threading.Thread(target=self._reopen, daemon=True)
        self._thread.start()

    def _reopen(self) -> None:
        with selectors.DefaultSelector() as sel:
            for sock in self.socks:
                sel.register(sock, selectors.EVENT_READ)
            while not self._stop.is_set() and self.reopened < self.max_reopens:
                for key, _ in sel.select(timeout=0.05):
                    # Readable: the server answered (408) or closed it. Replace it.
                    old = key.fileobj
                    assert isinstance(old, socket.socket)
                    sel.unregister(old)
                    old.close()
                    try:
                        new = self._open()
                    except OSError:
                        continue  # counted as closed; the next one may get through
                    self.socks.append(new)
                    sel.register(new, selectors.EVENT_READ)
                    self.reopened += 1

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for sock in self.socks:
            sock.close()


@pytest.mark.slow  # 520 connections, reopened as fast as the server closes them: 0.3 s idle, 4 s loaded
@pytest.mark.parametrize("per_peer_cap", [True, False], ids=["per-peer-cap", "table-full"])
def test_520_slowloris_sockets_do_not_shut_out_clients_with_the_secret(
    ots: LocalTablestore, descriptors: None, per_peer_cap: bool
) -> None:
    limits = ots.server.limits
    # With the cap (its default), one address holds 256 untrusted connections; without it, every
    # attacker counts against the whole table instead (512).
    limits.max_untrusted_per_peer = 256 if per_peer_cap else 10 * ATTACKERS
    # Long while the table fills (on a loaded machine, opening 520 sockets may take longer than
    # the deadline below, whose cuts would then keep the count from ever reaching the table's).
    limits.header_timeout_s = 60
    attack = Slowloris(ots, ATTACKERS)
    try:
        attack.open()
        expected = 256 if per_peer_cap else limits.max_connections
        http = ots.server._http
        # The server holds as many as it will (give or take the one slot a table that evicts
        # before it accepts may leave free), and has read each one's byte: they are stalled
        # requests, no longer fresh connections.
        stalled = lambda: sum(c.started is not None for c in list(http._conns.values()))  # noqa: E731
        assert eventually(lambda: stalled() >= expected - 1)
        # The request timeout stays at its 60 s: only the header deadline cuts the stalled heads.
        limits.header_timeout_s = 0.5
        # One client with a keep-alive connection, then a new connection for every call while
        # the attacker opens a new socket for every one the server closes.
        assert successes(CALLS, legit_client(ots), ots, within_s=30) >= 0.95 * CALLS
        attack.reopen()
        assert successes(CALLS, None, ots, within_s=30) >= 0.95 * CALLS
        assert eventually(lambda: attack.reopened > 0)  # the attack went on: closed, and reopened
    finally:
        attack.close()


@pytest.mark.slow
def test_a_stalled_head_is_cut_at_the_header_deadline_not_the_request_timeout(ots: LocalTablestore) -> None:
    ots.server.limits.header_timeout_s = 0.5  # and request_timeout_s stays 60 s
    with connect(ots) as slow, connect(ots) as silent:
        slow.sendall(b"POST /ListTable HTTP/1.1\r\nHost: x")
        assert read_response(slow)[0] == 408
        assert eventually(lambda: closed_by_server(slow) and closed_by_server(silent), within_s=5)
    assert ots.client().list_table() == ()


@pytest.mark.slow
def test_a_trusted_keep_alive_connection_outlives_the_header_deadline(ots: LocalTablestore) -> None:
    http = ots.server._http
    ots.server.limits.header_timeout_s = 0.3
    client = legit_client(ots)
    assert client.list_table() == ()  # its pooled connection is now trusted, and idle
    assert eventually(lambda: http.open_connections == 1)
    with connect(ots) as later:  # opened after the client's connection went idle
        assert eventually(lambda: closed_by_server(later), within_s=5)
        # Swept no later than `later` had it been subject to the same deadline: it is still open.
        assert http.open_connections == 1
    assert client.list_table() == ()


def test_one_peer_holds_at_most_its_cap_of_untrusted_connections_the_oldest_go(
    ots: LocalTablestore,
) -> None:
    limits = ots.server.limits
    limits.max_untrusted_per_peer = 10
    limits.header_timeout_s = 60  # only the cap closes connections here
    socks = []
    try:
        for _ in range(30):
            sock = connect(ots)
            sock.sendall(b"P")
            socks.append(sock)
        assert eventually(lambda: all(closed_by_server(s) for s in socks[:20]), within_s=10)
        assert not any(closed_by_server(s) for s in socks[20:])
        # A client with the secret from the same address still gets in (closing the oldest of
        # the ten), and once trusted its connection does not count against the cap.
        client = legit_client(ots)
        assert client.list_table() == ()
        socks.append(connect(ots))
        socks[-1].sendall(b"P")
        assert eventually(lambda: ots.server._http.open_connections == 11)
        assert client.list_table() == ()
    finally:
        for sock in socks:
            sock.close()


def test_a_full_table_closes_untrusted_connections_before_a_trusted_idle_one(ots: LocalTablestore) -> None:
    limits = ots.server.limits
    limits.max_connections = 20
    limits.header_timeout_s = 60  # only the table's limit closes connections here
    client = legit_client(ots)
    assert client.list_table() == ()  # trusted, idle: the longest-idle connection of all
    socks = []
    try:
        for _ in range(40):
            sock = connect(ots)
            # A complete request without the secret (answered, the connection kept), then a
            # stalled one: answering a request must not make the connection trusted.
            sock.sendall(head("ListTable", 0))
            assert read_response(sock)[0] == 400
            sock.sendall(b"P")
            socks.append(sock)
        assert eventually(lambda: ots.server._http.open_connections <= 20)
        assert client.list_table() == ()
        assert client.list_table() == ()
    finally:
        for sock in socks:
            sock.close()
