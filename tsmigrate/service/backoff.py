"""Retries of the service layer, by the project's one policy (``tsmigrate.instance.retry``).

The SDK client retries whole requests by its own policy (give it ``tsmigrate.instance.retry.RETRY_POLICY``
or call ``retry.install(client)``). This covers what no client policy can: rows that failed
inside a batch, and conditional writes made safe to repeat by a request id (idempotent create).
Classification and delays are ``tsmigrate.instance.retry``'s: rejected failures (nothing was done) are
always retried; ambiguous ones (it may have been done) only where repeating is harmless.
Batches pace themselves with ``RetryQueue`` (failed rows wait on their own) and ``SendRate``
(AIMD on rows per second).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from tablestore import OTSServiceError

from tsmigrate.instance.retry import (
    AMBIGUOUS_CODES,
    REJECTED_CODES,
    RETRY_POLICY,
    TsmigrateRetryPolicy,
    ambiguous,
    rejected,
)

T = TypeVar("T")

# Per-row errors of BatchWriteRow / BatchGetRow, classified like whole requests.
_ROW_REJECTED = REJECTED_CODES | {"OTSQuotaExhausted"}


def row_retryable(code: str | None, repeatable: bool) -> bool:
    """May a row that failed with ``code`` inside a batch be sent again? ``repeatable``: the row
    sets or removes a whole row, or is a read (not an increment)."""
    return code in _ROW_REJECTED or (repeatable and code in AMBIGUOUS_CODES)


def call_retryable(exc: BaseException, repeatable: bool) -> bool:
    """May a failed call be repeated? (``repeatable`` as for rows.)"""
    return rejected(exc) or (repeatable and ambiguous(exc))


def delay(policy: TsmigrateRetryPolicy, attempt: int, code: str | None) -> float:
    """The policy's capped, jittered delay before attempt ``attempt + 1``."""
    return policy.get_retry_delay(attempt, OTSServiceError(503, code or "", ""), "")


def policy_for(retry: TsmigrateRetryPolicy | None) -> TsmigrateRetryPolicy:
    return RETRY_POLICY if retry is None else retry


def code_of(exc: Any) -> tuple[str, str]:
    return getattr(exc, "code", None) or type(exc).__name__, getattr(exc, "message", None) or str(exc)


class RetryQueue(Generic[T]):
    """Groups of failed rows backing off, each until its own time; the rest of a batch keeps
    going meanwhile. Times are the caller's clock (``time.monotonic``, or a test's)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, list[T]]] = []
        self._added = 0  # ties go first in, first out
        self.rows = 0

    def __bool__(self) -> bool:
        return bool(self._heap)

    def add(self, group: list[T], ready_at: float) -> None:
        self._added += 1
        self.rows += len(group)
        heapq.heappush(self._heap, (ready_at, self._added, group))

    def due(self, now: float) -> Iterator[T]:
        """The rows whose backoff is over, oldest group first (taken off the queue)."""
        while self._heap and self._heap[0][0] <= now:
            group = heapq.heappop(self._heap)[2]
            self.rows -= len(group)
            yield from group

    def next_ready(self) -> float:
        return self._heap[0][0]


class SendRate:
    """AIMD on the rows per second a batch sends (one request in flight at a time).

    Unpaced until the service throttles. A refused request, or one whose throttled share of rows
    is above ``tolerated``, cuts the rate to ``decrease`` times the lower of the current limit
    and the rate the service has been writing rows at; every other answer adds back a fixed
    step, so ``recover`` such answers regain what the cut took, and the batch goes unpaced again
    (pacing at an average rate would hold back every faster answer). A few throttled rows are
    retried on their own (a hot partition), without slowing the stream. Times are the caller's
    clock."""

    def __init__(self, *, decrease: float = 0.8, recover: int = 4, tolerated: float = 0.1,
                 sample: int = 200, floor: float = 50.0) -> None:
        self.decrease = decrease
        self.recover = recover
        self.tolerated = tolerated
        self.sample = sample  # a smaller request's share is taken of this many rows: a few say little
        self.floor = floor  # rows/s: throttling never stops a batch
        self.limit: float | None = None  # rows/s; None: unpaced
        self.step = 0.0
        self._top = 0.0  # the rate before the last cut
        self._next_send = 0.0
        self._written = 0  # rows written, and the time their requests took: the service's pace
        self._busy = 0.0

    def wait(self, now: float) -> float:
        """How long to wait before sending the next request."""
        return max(0.0, self._next_send - now)

    def answered(self, rows: int, throttled: int, sent_at: float, now: float,
                 refused: bool = False) -> None:
        """A request of ``rows`` rows sent at ``sent_at`` was answered at ``now``, ``throttled``
        of them throttled (``refused``: the whole request)."""
        self._written += rows - throttled
        self._busy += now - sent_at
        if refused or throttled > self.tolerated * max(rows, self.sample):
            # Over the whole batch so far: one small or refused request says little of the pace.
            served = (self._written if self._written else rows) / max(self._busy, 1e-6)
            self._top = served if self.limit is None else min(self.limit, served)
            self.limit = max(self.floor, self._top * self.decrease)
            self.step = max(0.0, self._top - self.limit) / self.recover
        elif self.limit is not None:
            self.limit += self.step
            if self.limit >= self._top:
                self.limit = None
        if self.limit is None:
            self._next_send = 0.0
        else:
            # A schedule that credits a slow answer (up to one request) to the next request, so
            # the pace is the limit on average, not a wait after every faster-than-average answer.
            interval = rows / self.limit
            self._next_send = max(self._next_send, sent_at - interval) + interval
