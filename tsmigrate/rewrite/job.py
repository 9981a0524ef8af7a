"""What a split task is given: where the instance is, and what to rewrite into what.

Both are small, picklable values: a Dask worker on another machine gets them with each task.
Credentials are never part of them; each worker reads its own from its environment.
``RewriteJob`` is the rewrite's row's job, part of the contract with services
(``tsmigrate.contract.staterow``); it is named here too.
"""

from __future__ import annotations

import os
from typing import Any

import attrs
from tablestore import OTSClient

from tsmigrate.contract.staterow import RewriteJob  # noqa: F401 (named here too)
from tsmigrate.instance import retry
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
