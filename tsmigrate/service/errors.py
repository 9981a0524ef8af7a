"""Typed errors of the service layer; each names the model, the row and the rule it broke."""

from __future__ import annotations

from typing import Any

# QueryError is defined below schema (a table family raises it too) and re-exported here, the
# very same class: import it from tsmigrate.service, as ever.
from tsmigrate.errors import QueryError as QueryError
from tsmigrate.errors import TsmigrateError


class RowError(TsmigrateError):
    """A row operation failed for a reason the caller must handle."""


class ConditionFailed(RowError):
    """The row existence expectation or a column condition did not hold (OTSConditionCheckFail)."""

    def __init__(self, message: str, *, model: str = "", key: Any = None):
        super().__init__(message)
        self.model = model
        self.key = key


class VersionConflict(ConditionFailed):
    """Optimistic locking: the row's version is not the one this writer read. ``current`` is the
    row as stored now (None when it no longer exists); reload, re-apply the change, retry."""

    def __init__(self, message: str, *, model: str, key: Any, expected: int | None, current: Any):
        super().__init__(message, model=model, key=key)
        self.expected = expected
        self.current = current


class AlreadyExists(ConditionFailed):
    """An idempotent create found the row created by another request; ``current`` is that row."""

    def __init__(self, message: str, *, model: str, key: Any, current: Any):
        super().__init__(message, model=model, key=key)
        self.current = current


class UpdateNotAllowed(RowError):
    """An update (``set=``, ``delete=``, ``increment=``) of a row whose table has
    ``allow_update=False``, refused before any request: Tablestore refuses every UpdateRow
    there. ``table`` is the table the write would go to (during a rewrite, possibly the other
    table of it); ``why`` says how the write came to go there, when not the model's own table."""

    def __init__(self, model: str, table: str, why: str = ""):
        self.model = model
        self.table = table
        super().__init__(
            f"{model}: cannot update a row of {table}{why}: {table} has allow_update=False, so "
            "Tablestore refuses UpdateRow there (a table with a TTL and a secondary or search "
            "index must have it), and set=, delete= and increment= are not possible; put the "
            "whole row with Rows.put instead (read it, change it, put it back; a condition or "
            "the model's version= keeps concurrent writers apart)"
        )


class RowValueError(TsmigrateError, ValueError):
    """A field value does not fit its declared type (never cast silently)."""


class BatchError(RowError):
    """Some rows of a batch failed for good; ``failures`` lists them, row by row."""

    def __init__(self, failures: list[Any]):
        self.failures = failures
        first = failures[0] if failures else None
        super().__init__(
            f"{len(failures)} row(s) of the batch failed"
            + (f"; first: {first.error_code} {first.error_message} ({first.key})" if first else "")
        )
