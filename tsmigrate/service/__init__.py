"""Models for services: rows, queries, batches, derived keys and table families, on the
official SDK, with the same API on ``OTSClient`` (``Rows``) and ``AsyncOTSClient``
(``AsyncRows``). See the README section "Models for services"."""

from tsmigrate.service.aio import AsyncRows
from tsmigrate.service.batch import BatchGetResult, BatchResult, Failure, Update
from tsmigrate.service.conditions import Attr
from tsmigrate.service.errors import (
    AlreadyExists,
    BatchError,
    ConditionFailed,
    QueryError,
    RowError,
    RowValueError,
    VersionConflict,
)
from tsmigrate.service.query import Exists, Match, Prefix, Range, between
from tsmigrate.service.table import Rows
from tsmigrate.service.testing import create_tables

__all__ = [
    "AlreadyExists", "AsyncRows", "Attr", "BatchError", "BatchGetResult", "BatchResult",
    "ConditionFailed", "Exists", "Failure", "Match", "Prefix", "QueryError", "Range", "RowError",
    "RowValueError", "Rows", "Update", "VersionConflict", "between", "create_tables",
]
