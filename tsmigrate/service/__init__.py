"""Models for services: rows, queries, batches, derived keys and table families, on the
official SDK, with the same API on ``OTSClient`` (``Rows``) and ``AsyncOTSClient``
(``AsyncRows``). See the README sections "Public API" and "Using the models in a service".

``__all__`` is this package's public API, every error a service can meet included (the routing
errors of a table a rewrite moves among them); its modules are internal."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
        UpdateNotAllowed,
        VersionConflict,
    )
    from tsmigrate.service.query import Exists, Match, Prefix, Range, between
    from tsmigrate.service.routing import RoutingError, RoutingUnavailable, WritesHeld, WriteUnconfirmed
    from tsmigrate.service.table import Rows
    from tsmigrate.service.testing import create_tables

__all__ = [
    "AlreadyExists", "AsyncRows", "Attr", "BatchError", "BatchGetResult", "BatchResult",
    "ConditionFailed", "Exists", "Failure", "Match", "Prefix", "QueryError", "Range", "RoutingError",
    "RoutingUnavailable", "RowError", "RowValueError", "Rows", "Update", "UpdateNotAllowed",
    "VersionConflict", "WriteUnconfirmed", "WritesHeld", "between", "create_tables",
]

# The public names, imported from their modules on first use (PEP 562): the rewrite engine
# imports tsmigrate.service.routing, which would otherwise load the whole model API with it.
_HOME = {
    "AsyncRows": "aio",
    "BatchGetResult": "batch", "BatchResult": "batch", "Failure": "batch", "Update": "batch",
    "Attr": "conditions",
    "AlreadyExists": "errors", "BatchError": "errors", "ConditionFailed": "errors",
    "QueryError": "errors", "RowError": "errors", "RowValueError": "errors",
    "UpdateNotAllowed": "errors", "VersionConflict": "errors",
    "Exists": "query", "Match": "query", "Prefix": "query", "Range": "query", "between": "query",
    "RoutingError": "routing", "RoutingUnavailable": "routing", "WriteUnconfirmed": "routing",
    "WritesHeld": "routing",
    "Rows": "table",
    "create_tables": "testing",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
