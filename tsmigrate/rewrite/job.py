"""What a split task is given: where the instance is, and what to rewrite into what.

Both are small, picklable values: a Dask worker on another machine gets them with each task.
Credentials are never part of them; each worker reads its own from its environment.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import attrs
from tablestore import OTSClient

from tsmigrate.instance import retry
from tsmigrate.schema import Table, table_from_dict, table_to_dict
from tsmigrate.wire.signing import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET


@attrs.frozen
class ConnectionSpec:
    """How a worker reaches the instance. Credentials come from the worker's environment
    (``ALIBABA_CLOUD_ACCESS_KEY_ID`` / ``_SECRET`` / ``_SECURITY_TOKEN``), or are the local
    server's documented defaults when ``local_defaults`` (the embedded instance)."""

    endpoint: str
    instance: str
    local_defaults: bool = False

    def client(self, **options: Any) -> OTSClient:
        """A client with tsmigrate's retry policy (``tsmigrate.instance.retry``: throttling and lost
        connections retried with capped, jittered delays); the rewrite's writer also retries the
        rows that failed inside a BatchWriteRow, by the same policy."""
        if self.local_defaults:
            key_id, secret, token = DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET, None
        else:
            from tsmigrate.instance.target import credentials

            key_id, secret, token = credentials(os.environ)
        return retry.install(
            OTSClient(self.endpoint, key_id, secret, self.instance, sts_token=token, **options)
        )


@attrs.frozen
class RewriteJob:
    """One rewrite: the source table as it is, the target table as declared (key derivations
    included), and the knobs of the copy.

    ``custom`` optionally names a function ``"module:function"`` that maps a row's natural field
    values (a dict) to the values the target key is built from; it is imported in each worker.
    ``created_ms`` is the timestamp given to cells that only existed as key columns in a
    source row that has no attribute cell to take a timestamp from.
    """

    id: str
    source: Table
    target: Table
    max_rows_per_s: float | None = None
    custom: str | None = None
    created_ms: int = attrs.field(factory=lambda: int(time.time() * 1000))

    def to_json(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "source": table_to_dict(self.source),
                "target": table_to_dict(self.target),
                "max_rows_per_s": self.max_rows_per_s,
                "custom": self.custom,
                "created_ms": self.created_ms,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> RewriteJob:
        data = json.loads(text)
        return cls(
            id=data["id"],
            source=table_from_dict(data["source"]),
            target=table_from_dict(data["target"]),
            max_rows_per_s=data.get("max_rows_per_s"),
            custom=data.get("custom"),
            created_ms=data["created_ms"],
        )
