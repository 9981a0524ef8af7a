"""Client-side pacing of table-level operations.

Tablestore allows about 10 table operations (CreateTable, DescribeTable, ListTable, ...) per
second per instance and answers more with "Too frequent table operations.". The SDK retries
those with exponential backoff, which turns a burst into seconds of waiting; pacing the calls
to the limit instead finishes as early as the limit allows.

Pacing sits on the client's connection (``paced``), below the SDK and the raw client, so every
table-level request a command sends is paced, retries included, whichever code path sends it.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# The service's table-level (meta) operations, the ones its per-instance rate limit counts.
TABLE_OPERATIONS = frozenset({
    "CreateTable", "DeleteTable", "UpdateTable", "DescribeTable", "ListTable",
    "CreateIndex", "DropIndex", "AddDefinedColumn", "DeleteDefinedColumn",
})


class Pacer:
    """At most ``per_second`` calls reach the service in any window of ``window_s`` seconds.

    A call reaches the service somewhere between being sent and its answer coming back, so a
    call holds its slot from sending until ``window_s`` after its answer: the call that takes the
    slot next reaches the service a whole window later, whatever the network or the thread
    scheduling did meanwhile.
    """

    def __init__(self, per_second: int, window_s: float = 1.0, margin_s: float = 0.005):
        if per_second < 1:
            raise ValueError("per_second must be at least 1")
        self.per_second = per_second
        # The margin absorbs the difference between this clock and the service's.
        self.window_s = window_s + margin_s
        self._in_flight = 0
        self._finished: collections.deque[float] = collections.deque()  # answer times, ascending
        self._changed = threading.Condition()

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of the window's slots for the duration of a call."""
        with self._changed:
            while True:
                now = time.monotonic()
                while self._finished and now - self._finished[0] >= self.window_s:
                    self._finished.popleft()
                if self._in_flight + len(self._finished) < self.per_second:
                    self._in_flight += 1
                    break
                # Wait for the oldest answer to leave the window, or for a call to finish.
                wait = self.window_s - (now - self._finished[0]) if self._finished else None
                self._changed.wait(wait)
        try:
            yield
        finally:
            with self._changed:
                self._in_flight -= 1
                self._finished.append(time.monotonic())
                self._changed.notify_all()


class PacedConnection:
    """An SDK connection pool whose table-level requests take a slot of ``pacer``."""

    def __init__(self, connection: Any, pacer: Pacer):
        self._connection = connection
        self._pacer = pacer

    def send_receive(self, url: str, request_headers: Any, request_body: bytes) -> Any:
        if url.rsplit("/", 1)[-1] not in TABLE_OPERATIONS:
            return self._connection.send_receive(url, request_headers, request_body)
        with self._pacer.slot():
            return self._connection.send_receive(url, request_headers, request_body)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


def paced(client: Any, per_second: int | None) -> Any:
    """``client`` (an ``OTSClient``) with its table-level requests paced to ``per_second``
    (None: unchanged, for a server without a limit). The SDK and the raw client both send
    through ``client.connection``."""
    if per_second:
        client.connection = PacedConnection(client.connection, Pacer(per_second))
    return client
