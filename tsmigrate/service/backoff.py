"""Retries of the service layer, by the project's one policy (``tsmigrate.retry``).

The SDK client retries whole requests by its own policy (give it ``tsmigrate.retry.RETRY_POLICY``
or call ``retry.install(client)``). This covers what no client policy can: rows that failed
inside a batch, and conditional writes made safe to repeat by a request id (idempotent create).
Classification and delays are ``tsmigrate.retry``'s: rejected failures (nothing was done) are
always retried; ambiguous ones (it may have been done) only where repeating is harmless.
"""

from __future__ import annotations

from typing import Any

from tablestore import OTSServiceError

from tsmigrate.retry import (
    AMBIGUOUS_CODES,
    REJECTED_CODES,
    RETRY_POLICY,
    TsmigrateRetryPolicy,
    ambiguous,
    rejected,
)

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
