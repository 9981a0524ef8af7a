"""Which failures are worth retrying, and how long to wait: capped exponential backoff with jitter.

The SDK's own retry policy already retries throttled requests; this covers what it does not:
rows that failed inside a batch, and writes whose answer was lost (a timeout or a dropped
connection) where the operation itself is safe to repeat (an idempotent create).
"""

from __future__ import annotations

import asyncio
import random

import attrs
import urllib3.exceptions
from tablestore import OTSServiceError

# Error codes that mean "not done, try again later" (throttling and transient unavailability).
RETRYABLE_CODES = frozenset({
    "OTSServerBusy", "OTSNotEnoughCapacityUnit", "OTSOperationThrottled", "OTSQuotaExhausted",
    "OTSPartitionUnavailable", "OTSTableNotReady", "OTSRowOperationConflict",
    "OTSTimeout", "OTSInternalServerError", "OTSServerUnavailable",
})
THROTTLING_CODES = frozenset({
    "OTSServerBusy", "OTSNotEnoughCapacityUnit", "OTSOperationThrottled", "OTSQuotaExhausted",
})


def retryable_code(code: str | None) -> bool:
    return code in RETRYABLE_CODES


def transport_error(exc: BaseException) -> bool:
    """A request whose answer never came: it may or may not have been executed."""
    if isinstance(exc, (urllib3.exceptions.HTTPError, OSError, asyncio.TimeoutError)):
        return True
    try:
        import aiohttp  # the SDK's asyncio transport
    except ImportError:  # pragma: no cover - installed with the SDK
        return False
    return isinstance(exc, aiohttp.ClientError)


def retryable(exc: BaseException) -> bool:
    if isinstance(exc, OTSServiceError):
        return retryable_code(exc.code) or exc.http_status in (500, 502, 503)
    return transport_error(exc)


@attrs.frozen
class Backoff:
    """``min(cap, base * 2**attempt)`` seconds, jittered to 50-100% of it, ``attempts`` tries."""

    base: float = 0.02
    cap: float = 2.0
    attempts: int = 12

    def delay(self, attempt: int) -> float:
        limit = min(self.cap, self.base * (2 ** min(attempt, 30)))
        return limit * (0.5 + 0.5 * random.random())


DEFAULT_BACKOFF = Backoff()
