"""BatchWriteRow within the service's limits, retrying only the rows that failed.

Rows arrive encoded (PlainBuffer, HEADER + row) and go out in requests of at most 200 rows and
4 MB. A request the service rejects as a whole (throttling, a busy partition) is sent again
after a capped, jittered delay; in a request that went through, only the rows that failed with a
retryable error are sent again. A row that fails for good raises WriteError naming its key.

``RateLimiter`` paces rows per second (``--max-rows-per-s``), shared by the threads of a process.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import attrs
import urllib3.exceptions
from tablestore import OTSClient
from tablestore.error import OTSServiceError
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.errors import TsmigrateError
from tsmigrate.local.plainbuffer import HEADER, assemble_row, decode_row, encode_primary_key_cells
from tsmigrate.rawclient import RawClient
from tsmigrate.rewrite.transform import RowTransform, TargetRow, format_key

MAX_BATCH_ROWS = 200
MAX_BATCH_BYTES = 4 * 1024 * 1024 - 64 * 1024  # the service's 4 MB, less the request's framing
MAX_ATTEMPTS = 12

# Errors after which the same write may be sent again (the service did nothing, or a row put
# with absolute values is the same when repeated).
RETRYABLE = frozenset({
    "OTSServerBusy", "OTSNotEnoughCapacityUnit", "OTSOperationThrottled", "OTSTableNotReady",
    "OTSPartitionUnavailable", "OTSRowOperationConflict", "OTSTimeout", "OTSInternalServerError",
    "OTSServerUnavailable", "OTSQuotaExhausted",
})


class WriteError(TsmigrateError):
    """Rows could not be written to the target."""


@attrs.define
class Backoff:
    """Exponential delays, capped, with "equal jitter" (half fixed, half random) so workers that
    failed together do not retry together."""

    base_s: float = 0.05
    cap_s: float = 4.0

    def delay(self, attempt: int) -> float:
        limit = min(self.cap_s, self.base_s * 2**attempt)
        return limit / 2 + random.uniform(0, limit / 2)


class RateLimiter:
    """A token bucket of rows per second (None: unlimited), safe to share between threads."""

    def __init__(self, rows_per_s: float | None) -> None:
        self.rate = rows_per_s
        self._lock = threading.Lock()
        self._next = time.monotonic()

    def acquire(self, rows: int) -> None:
        if not self.rate:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + rows / self.rate
        if start > now:
            time.sleep(start - now)


@attrs.define
class WriteStats:
    rows: int = 0
    requests: int = 0
    retried_rows: int = 0
    throttled: int = 0


class BatchWriter:
    def __init__(
        self,
        client: OTSClient,
        table: str,
        limiter: RateLimiter | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.raw = RawClient(client)
        self.table = table
        self.limiter = limiter or RateLimiter(None)
        self.backoff = backoff or Backoff()
        self.stats = WriteStats()

    def put(self, rows: Sequence[bytes]) -> None:
        """Write encoded rows (HEADER + row each), whole rows, timestamps as given."""
        self._write(pb.PUT, rows)

    def delete(self, keys: Sequence[bytes]) -> None:
        """Delete rows by encoded key (HEADER + a row with the delete marker)."""
        self._write(pb.DELETE, keys)

    def _write(self, kind: int, rows: Sequence[bytes]) -> None:
        batch: list[bytes] = []
        size = 0
        for row in rows:
            if batch and (len(batch) == MAX_BATCH_ROWS or size + len(row) > MAX_BATCH_BYTES):
                self._send(kind, batch)
                batch, size = [], 0
            batch.append(row)
            size += len(row)
        if batch:
            self._send(kind, batch)

    def _send(self, kind: int, rows: list[bytes]) -> None:
        self.limiter.acquire(len(rows))
        pending = rows
        for attempt in range(MAX_ATTEMPTS):
            failed = self._request(kind, pending, attempt)
            if not failed:
                self.stats.rows += len(rows)
                return
            self.stats.retried_rows += len(failed)
            pending = failed
            time.sleep(self.backoff.delay(attempt))
        raise WriteError(
            f"{len(pending)} rows could not be written to {self.table!r} after {MAX_ATTEMPTS} attempts "
            f"(the service kept throttling), first {format_key(decode_row(pending[0]).primary_key)}; "
            "run the rewrite again to continue from its checkpoints"
        )

    def _request(self, kind: int, rows: list[bytes], attempt: int) -> list[bytes]:
        """Send once; the rows to send again (all of them when the request was refused)."""
        request = pb.BatchWriteRowRequest()
        table = request.tables.add(table_name=self.table)
        for row in rows:
            item = table.rows.add(type=kind, row_change=row)
            item.condition.row_existence = pb.IGNORE
        self.stats.requests += 1
        try:
            response = self.raw.call("BatchWriteRow", request, pb.BatchWriteRowResponse)
        except OTSServiceError as exc:
            if exc.code not in RETRYABLE:
                message = f"BatchWriteRow to {self.table!r} failed: {exc.code} {exc.message}"
                raise WriteError(message) from None
            self.stats.throttled += 1
            return rows
        except (urllib3.exceptions.HTTPError, OSError):
            return rows  # puts and deletes of whole rows are the same when sent again
        failed = []
        for row, result in zip(rows, response.tables[0].rows, strict=True):
            if result.is_ok:
                continue
            if result.error.code not in RETRYABLE:
                key = format_key(decode_row(row).primary_key)
                raise WriteError(
                    f"row {key} of {self.table!r} was refused: {result.error.code} {result.error.message}"
                )
            failed.append(row)
        return failed


def encode_delete(key: Sequence[tuple[str, Any]]) -> bytes:
    pk_cells, crcs = encode_primary_key_cells(key)
    return HEADER + assemble_row(pk_cells, crcs, (), delete_marker=True)


def write_rows(client: OTSClient, table: str, rows: Sequence[TargetRow]) -> None:
    """Put whole target rows (every version with its timestamp); for change capture."""
    BatchWriter(client, table).put([RowTransform.encode(row)[0] for row in rows])


def delete_keys(client: OTSClient, table: str, keys: Sequence[Sequence[tuple[str, Any]]]) -> None:
    """Delete target rows by key; for change capture."""
    BatchWriter(client, table).delete([encode_delete(key) for key in keys])
