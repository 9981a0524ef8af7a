"""One retry policy for every call tsmigrate makes to Tablestore.

The SDK retries server errors (500, ``OTSTimeout``) only for its own short list of read APIs
(not ListSearchIndex, DescribeSearchIndex, nor the APIs the raw client calls), and never socket
errors. tsmigrate uses one policy instead, shared by the SDK client and the raw client:

- **Rejected** requests (the service did nothing: ``OTSServerBusy``, ``OTSNotEnoughCapacityUnit``,
  ``OTSOperationThrottled``, ``OTSTableNotReady``, ``OTSPartitionUnavailable``,
  ``OTSRowOperationConflict``, ``OTSOperationConflict``, ``OTSQuotaExhausted`` with the documented
  throttling message "Too frequent table operations.", a connection that could not be opened)
  are retried on every API.
- **Ambiguous** failures (the request may have been done: HTTP 500/502/503/504,
  ``OTSTimeout``, ``OTSInternalServerError``, ``OTSServerUnavailable``, a socket error after
  sending) are retried only on the APIs in ``IDEMPOTENT_APIS`` (every read, and writes that set
  an absolute value). Other writes (CreateTable, CreateIndex, DeleteSearchIndex, ...) are
  checked by a read instead: ``adapter.execute`` asks "did it happen?" before trying again.
- Delays are exponential, capped and jittered ("equal jitter": half the capped delay plus a
  random part of the other half), so clients that failed together do not retry together.

Public API (the rewrite engine and any other caller use these rather than loops of their own):

- ``RETRY_POLICY``: the shared ``TsmigrateRetryPolicy`` (a ``tablestore.RetryPolicy``); pass it as
  ``OTSClient(..., retry_policy=RETRY_POLICY)``.
- ``install(client)``: give an ``OTSClient`` the policy (unless it was built with a policy other
  than the SDK's default) and retry its socket errors by the same rules; returns the client.
  ``target.connect`` and the engine's entry points call it.
- ``retrying(fn, api=..., idempotent=True)``: call ``fn()`` and retry it by the policy; for a
  sequence of calls that is safe to repeat as a whole (e.g. "list tables, create if missing").
- ``rejected(exc)``, ``ambiguous(exc)``, ``retryable(exc, api)``: the classification above.
- ``unreachable(exc)``: the connection already gave up on an endpoint that never answered
  (``FIRST_CONTACT_RETRIES``); a caller's own retry loop gives up too.
- ``SEND_WINDOW`` / ``SendWindow``: until when the attempts of one call may be sent (set by the
  routing of ``tsmigrate.service``: a write goes only while the route it took is trusted).
  ``guard(client)`` makes every attempt of the client's calls check it at its connection,
  whatever its retry policy, and raise ``WindowClosed`` rather than send once it closed; the
  policy here also stops retrying then (``should_retry``), so the last error reaches the caller.

A conditional write (``expect="not_exist"``, a column condition) that the policy retried after
an ambiguous failure may answer ``OTSConditionCheckFail`` because the first attempt did land;
callers of conditional writes read the row back before treating that as a conflict (see
``state.State.acquire``), or send it under ``SINGLE_ATTEMPT`` and repeat it themselves, so they
know when a repeat followed an ambiguous failure (``tsmigrate.service.rows``).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import urllib3.exceptions
from tablestore.error import OTSClientError, OTSServiceError
from tablestore.retry import DefaultRetryPolicy, RetryPolicy

T = TypeVar("T")

REJECTED_CODES = frozenset({
    "OTSServerBusy",
    "OTSNotEnoughCapacityUnit",
    "OTSOperationThrottled",
    "OTSTableNotReady",
    "OTSPartitionUnavailable",
    "OTSRowOperationConflict",
    "OTSOperationConflict",
})
TOO_FREQUENT = ("OTSQuotaExhausted", "Too frequent table operations.")
THROTTLING_CODES = frozenset({"OTSServerBusy", "OTSNotEnoughCapacityUnit", "OTSOperationThrottled"})
AMBIGUOUS_CODES = frozenset({"OTSTimeout", "OTSInternalServerError", "OTSServerUnavailable"})
AMBIGUOUS_STATUSES = frozenset({500, 502, 503, 504})

READ_APIS = frozenset({
    "ListTable", "DescribeTable", "GetRow", "BatchGetRow", "GetRange",
    "ListSearchIndex", "DescribeSearchIndex", "Search", "ParallelScan", "ComputeSplits",
    "ComputeSplitPointsBySize", "ListStream", "DescribeStream", "GetShardIterator",
    "GetStreamRecord", "ListTimeseriesTable", "DescribeTimeseriesTable", "GetTimeseriesData",
    "QueryTimeseriesMeta",
})
# Writes whose repetition leaves the same state: UpdateTable sets absolute options, throughput
# and stream settings; PutRow / DeleteRow / BatchWriteRow set or remove whole rows (conditional
# ones are read back by their callers). Not UpdateRow (increments) nor UpdateSearchIndex (a
# switch swaps back when repeated).
IDEMPOTENT_WRITE_APIS = frozenset({"UpdateTable", "PutRow", "DeleteRow", "BatchWriteRow"})
IDEMPOTENT_APIS = READ_APIS | IDEMPOTENT_WRITE_APIS

# Raised before a request left this machine: nothing can have been done.
_NOT_SENT = (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError)
NETWORK_ERRORS = (urllib3.exceptions.HTTPError, OSError)


def _cause(exc: BaseException) -> BaseException:
    """urllib3 wraps the socket error that ended its own retries; judge that one."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        return exc.reason
    return exc


def rejected(exc: BaseException) -> bool:
    """The service (or the network) refused the request before doing anything."""
    if isinstance(exc, OTSServiceError):
        return exc.code in REJECTED_CODES or (exc.code, exc.message) == TOO_FREQUENT
    return isinstance(_cause(exc), _NOT_SENT)


def ambiguous(exc: BaseException) -> bool:
    """The request failed in a way that says nothing about whether it was done."""
    if isinstance(exc, OTSServiceError):
        return exc.code in AMBIGUOUS_CODES or exc.http_status in AMBIGUOUS_STATUSES
    if isinstance(exc, OTSClientError):  # an error answer whose body could not be read
        return (exc.http_status or 0) in AMBIGUOUS_STATUSES
    return isinstance(exc, NETWORK_ERRORS) and not rejected(exc)


def retryable(exc: BaseException, api: str) -> bool:
    """May ``api`` be sent again after failing with ``exc``?"""
    return rejected(exc) or (ambiguous(exc) and api in IDEMPOTENT_APIS)


def unreachable(exc: BaseException) -> bool:
    """The connection gave up on an endpoint that never answered in this process (see
    ``FIRST_CONTACT_RETRIES``): a caller's own retry loop ends here as well."""
    return bool(getattr(exc, "tsmigrate_unreachable", False))


def _throttled(exc: BaseException) -> bool:
    if not isinstance(exc, OTSServiceError):
        return False
    return exc.code in THROTTLING_CODES or (exc.code, exc.message) == TOO_FREQUENT


class SendWindow:
    """Until when (``time.monotonic()``) the attempts of one call may be sent; what was sent."""

    __slots__ = ("deadline", "failure", "sent")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.sent = 0  # attempts that left this process
        self.failure: BaseException | None = None  # how the last of them failed, if it did

    def open(self) -> bool:
        return time.monotonic() < self.deadline


# Set around one call whose attempts must all be sent before a deadline (a routed write): the
# connection (``guard``) refuses to send past it and the policy stops retrying.
SEND_WINDOW: ContextVar[SendWindow | None] = ContextVar("tsmigrate_send_window", default=None)


class WindowClosed(Exception):
    """An attempt was not sent: the window its caller gave for sending it had closed.
    ``sent``: attempts of the call sent before (0: the call never left this process);
    ``failure``: how the last of them failed (None when unknown)."""

    def __init__(self, sent: int, failure: BaseException | None) -> None:
        super().__init__(f"not sent: its send window closed after {sent} attempt(s)")
        self.sent = sent
        self.failure = failure


def window_open() -> bool:
    window = SEND_WINDOW.get()
    return window is None or window.open()


# Set while a caller that repeats a request itself sends it (a conditional write that judges its
# own lost answers, tsmigrate.service.rows): the client's policy then leaves every retry to it.
SINGLE_ATTEMPT: ContextVar[bool] = ContextVar("tsmigrate_single_attempt", default=False)


class TsmigrateRetryPolicy(RetryPolicy):
    """The SDK's ``RetryPolicy`` interface with tsmigrate's rules (see the module docstring)."""

    def __init__(
        self,
        max_retries: int = 12,
        base_delay_s: float = 0.05,
        throttled_delay_s: float = 0.3,
        max_delay_s: float = 4.0,
        seed: int | None = None,
    ) -> None:
        self.max_retries = max_retries
        self.base_delay_s = base_delay_s
        self.throttled_delay_s = throttled_delay_s  # the service asks to back off harder
        self.max_delay_s = max_delay_s
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def should_retry(self, retry_times: int, exception: BaseException, api_name: str) -> bool:
        return (
            retry_times < self.max_retries and retryable(exception, api_name)
            and not SINGLE_ATTEMPT.get() and window_open()
        )

    def get_retry_delay(self, retry_times: int, exception: BaseException, api_name: str) -> float:
        base = self.throttled_delay_s if _throttled(exception) else self.base_delay_s
        limit = min(self.max_delay_s, base * 2 ** retry_times)
        with self._lock:
            return limit / 2 + self._random.uniform(0, limit / 2)


RETRY_POLICY = TsmigrateRetryPolicy()


# An endpoint that never answered in this process and refuses connections (or has no address)
# is most likely mistyped or not started: it gets this many retries, not the policy's dozen,
# so `tsmigrate plan` against it says "cannot reach" at once. One that answered before gets
# the full policy: a deploy's network that drops out mid-run.
FIRST_CONTACT_RETRIES = 2
_answered: set[str] = set()  # endpoints that answered in this process


class RetryingConnection:
    """The SDK's connection pool, with socket errors retried by the client's policy (the SDK
    retries only errors the service answered)."""

    def __init__(self, inner: Any, client: Any) -> None:
        self.inner = inner
        self._client = client

    def send_receive(self, url: str, headers: dict[str, str], body: bytes) -> Any:
        api = url.rsplit("/", 1)[-1]
        endpoint = getattr(self.inner, "host", "")
        attempt = 0
        while True:
            try:
                response = self.inner.send_receive(url, headers, body)
                _answered.add(endpoint)
                return response
            except NETWORK_ERRORS as exc:
                policy = self._client.retry_policy
                if not isinstance(policy, TsmigrateRetryPolicy) or not policy.should_retry(
                    attempt, exc, api
                ):
                    raise
                if (attempt >= FIRST_CONTACT_RETRIES and endpoint not in _answered
                        and isinstance(_cause(exc), _NOT_SENT)):
                    # Callers that repeat a whole sequence (``retrying``) must not start the
                    # count again: the endpoint has had its chance.
                    exc.tsmigrate_unreachable = True  # type: ignore[union-attr]
                    raise
                time.sleep(policy.get_retry_delay(attempt, exc, api))
                attempt += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _failure(answer: Any) -> BaseException | None:
    """The error an HTTP answer of the service carries (None: a success)."""
    status, _reason, headers, body = answer
    if 200 <= status < 300:
        return None
    from google.protobuf.message import DecodeError
    from tablestore.protobuf import table_store_pb2

    error = table_store_pb2.Error()
    try:
        error.ParseFromString(body)
    except (DecodeError, TypeError):
        return OTSClientError(f"HTTP status: {status}", status)
    return OTSServiceError(status, error.code, error.message, (headers or {}).get("x-ots-requestid", ""))


def _sending(window: SendWindow | None) -> None:
    if window is not None and not window.open():
        raise WindowClosed(window.sent, window.failure)


def _sent(window: SendWindow | None, answer: Any = None, error: BaseException | None = None) -> None:
    if window is not None:
        window.sent += 1
        window.failure = error if error is not None else _failure(answer)


class GuardedConnection:
    """An SDK connection pool that sends an attempt only while the caller's ``SEND_WINDOW`` is
    open (every attempt: the SDK's retries by any policy, and the socket retries of
    ``RetryingConnection`` when it wraps this one)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def send_receive(self, url: str, headers: dict[str, str], body: bytes) -> Any:
        window = SEND_WINDOW.get()
        _sending(window)
        try:
            answer = self.inner.send_receive(url, headers, body)
        except BaseException as exc:
            _sent(window, error=exc)
            raise
        _sent(window, answer)
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class AsyncGuardedConnection(GuardedConnection):
    """``GuardedConnection`` for an ``AsyncOTSClient``'s pool."""

    async def send_receive(self, url: str, headers: dict[str, str], body: bytes) -> Any:  # type: ignore[override]
        window = SEND_WINDOW.get()
        _sending(window)
        try:
            answer = await self.inner.send_receive(url, headers, body)
        except BaseException as exc:
            _sent(window, error=exc)
            raise
        _sent(window, answer)
        return answer


def guard(client: Any) -> Any:
    """Make every attempt ``client`` sends check ``SEND_WINDOW`` first (``GuardedConnection``);
    harmless to calls made without one. An ``AsyncOTSClient`` creates its pool when first used
    (and again after ``close``): each pool it hands out is guarded (the client keeps its own)."""
    create = getattr(client, "_get_or_create_connection", None)
    if create is not None:
        if not getattr(create, "tsmigrate_guarded", False):
            guards: list[AsyncGuardedConnection] = []

            def guarded() -> Any:
                pool = create()
                if not guards or guards[0].inner is not pool:
                    guards[:] = [AsyncGuardedConnection(pool)]
                return guards[0]

            guarded.tsmigrate_guarded = True  # type: ignore[attr-defined]
            client._get_or_create_connection = guarded
        return client
    connection = getattr(client, "connection", None)
    if connection is None:  # not an SDK client (a test's stand-in): nothing to guard
        return client
    inner = connection.inner if isinstance(connection, RetryingConnection) else connection
    if not isinstance(inner, GuardedConnection) and not isinstance(connection, GuardedConnection):
        if isinstance(connection, RetryingConnection):  # below its socket retries: each checks
            connection.inner = GuardedConnection(inner)
        else:
            client.connection = GuardedConnection(connection)
    return client


def install(client: Any) -> Any:
    """Make ``client`` retry by ``RETRY_POLICY`` (its SDK calls, the raw client's and socket
    errors), unless it was built with a policy of its own (``NoRetryPolicy`` stays off)."""
    if type(client.retry_policy) is DefaultRetryPolicy:
        client.retry_policy = RETRY_POLICY
    if isinstance(client.retry_policy, TsmigrateRetryPolicy) and not isinstance(
        client.connection, RetryingConnection
    ):
        client.connection = RetryingConnection(client.connection, client)
    return client


def policy_of(client: Any) -> TsmigrateRetryPolicy | None:
    """The client's policy if it is tsmigrate's, else None (the caller then does not retry)."""
    policy = getattr(client, "retry_policy", None)
    return policy if isinstance(policy, TsmigrateRetryPolicy) else None


def retrying(
    fn: Callable[[], T],
    *,
    api: str = "",
    idempotent: bool = True,
    policy: TsmigrateRetryPolicy = RETRY_POLICY,
) -> T:
    """``fn()``, called again after each retryable failure (ambiguous ones only when
    ``idempotent``), with the policy's backoff; the last error propagates."""
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            retry = rejected(exc) or (idempotent and ambiguous(exc))
            if not retry or attempt >= policy.max_retries or unreachable(exc):
                raise
            time.sleep(policy.get_retry_delay(attempt, exc, api))
            attempt += 1
