"""Data migrations (``op.backfill(table, fn, columns=...)``) on the rewrite engine's machinery:
the table cut into key ranges (``splits``), one resumable split task per range run by the same
executors (threads, processes, Dask), a checkpoint per page in ``tsmigrate_state``, the same
rate limiter and progress.

``fn(row)`` gets a row as a dict (its primary key columns and the newest value of each column
read: ``columns``, or every column) and returns the columns to change: ``{column: value}``, a
value of ``None`` deleting that column; an empty result (or None) leaves the row alone. Columns
whose new value equals the one read are not written, so a row ``fn`` leaves as it is costs no
write.

Writes are UpdateRow with the condition that the row exists: a row a service deleted while the
backfill ran is not brought back holding only the backfilled columns.

Killed at any moment, the next run continues each range from its last checkpoint (the page
after the last one whose writes all landed): the page that was being written is processed
again, and the counts only ever cover whole pages, so no row is missed or counted twice. ``fn``
must therefore give the same columns when it runs again on a row it already changed, as any
function of the columns it does not write does (``region = payload["region"]``; not
``visits = visits + 1``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
import tablestore as ts

from tsmigrate.contract import functions
from tsmigrate.contract.transform import format_key
from tsmigrate.errors import TsmigrateError
from tsmigrate.instance import adapter, retry
from tsmigrate.instance.rawclient import RawClient
from tsmigrate.instance.state import STATE_TABLE
from tsmigrate.rewrite import checkpoints, executors, splits
from tsmigrate.rewrite.checkpoints import DONE, RUNNING
from tsmigrate.rewrite.copy import FIRST_PAGE_ROWS, PAGE_ROWS, SplitResult, read_page
from tsmigrate.rewrite.job import ConnectionSpec
from tsmigrate.rewrite.writer import MAX_BATCH_ROWS, RateLimiter, WriteError
from tsmigrate.schema import Table, table_from_dict, table_to_dict
from tsmigrate.wire.plainbuffer import Row, decode_rows

KIND = "backfill"  # ("backfill", key): the job a data migration runs, and whether it finished
MAX_BATCH_BYTES = 3 * 1024 * 1024  # below the service's 4 MB for BatchWriteRow, framing included
_VALUE_TYPES = (str, int, float, bool, bytes, bytearray)


class BackfillError(TsmigrateError):
    """A data migration cannot go on; names the table, the row and why."""


@attrs.frozen
class BackfillJob:
    """One data migration run: the table (its key, from the live instance), the function's
    reference (``tsmigrate.contract.functions``), the columns it reads (None: all)."""

    id: str
    table: Table
    fn: str
    columns: tuple[str, ...] | None = None
    max_rows_per_s: float | None = None

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "table": table_to_dict(self.table), "fn": self.fn,
                           "columns": None if self.columns is None else list(self.columns)},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BackfillJob:
        data = json.loads(text)
        columns = data.get("columns")
        return cls(data["id"], table_from_dict(data["table"]), data["fn"],
                   None if columns is None else tuple(columns))

    @property
    def columns_to_get(self) -> list[str]:
        """The key columns too: a row holding none of the columns asked for is still returned."""
        if self.columns is None:
            return []
        return [*self.table.primary_key_names, *self.columns]


@attrs.frozen
class Update:
    primary_key: list[tuple[str, Any]]
    put: list[tuple[str, Any]]
    delete: list[str]


def row_values(row: Row) -> dict[str, Any]:
    """A row as ``fn`` sees it: key columns and the newest value of each attribute."""
    values: dict[str, Any] = dict(row.primary_key)
    for cell in row.cells:  # newest version first
        values.setdefault(cell.name, bytes(cell.value) if isinstance(cell.value, bytearray) else cell.value)
    return values


def update_of(fn: Callable[[dict[str, Any]], Any], job: BackfillJob, row: Row) -> Update | None:
    """What ``fn`` changes in ``row`` (None: nothing)."""
    values = row_values(row)
    where = f"row {format_key(row.primary_key)} of table {job.table.name!r}"
    try:
        result = fn(dict(values))
    except Exception as exc:
        raise BackfillError(
            f"the backfill function {job.fn.rpartition(':')[2]} raised {exc!r} on {where}; fix the "
            "function or the row, then run again: the backfill continues from its checkpoints"
        ) from exc
    if not result:
        return None
    if not isinstance(result, Mapping):
        raise BackfillError(
            f"the backfill function {job.fn.rpartition(':')[2]} returned {result!r} for {where}; "
            "it must return a dict of the columns to set ({column: value, or None to delete})"
        )
    keys = set(job.table.primary_key_names)
    put: list[tuple[str, Any]] = []
    delete: list[str] = []
    read = job.columns
    for name, value in result.items():
        if not isinstance(name, str) or name in keys:
            raise BackfillError(
                f"the backfill function returned column {name!r} for {where}: a primary key "
                "column cannot change in place (declare a new key and rewrite the table)"
            )
        was_read = read is None or name in read
        if value is None:
            if not was_read or name in values:
                delete.append(name)
            continue
        if not isinstance(value, _VALUE_TYPES):
            raise BackfillError(
                f"the backfill function set {name}={value!r} on {where}: a column holds str, int, "
                "float, bool or bytes"
            )
        if not (was_read and name in values and values[name] == value and type(values[name]) is type(value)):
            put.append((name, bytearray(value) if isinstance(value, bytes) else value))
    if not put and not delete:
        return None
    return Update(list(row.primary_key), put, delete)


class UpdateWriter:
    """UpdateRow in BatchWriteRow requests (200 rows, about 3 MB), each conditional on the row
    existing; rows that fail with a retryable error are sent again after the retry policy's
    delays; returns how many rows were gone (the condition failed)."""

    def __init__(self, client: Any, table: str, limiter: RateLimiter) -> None:
        self.client = client
        self.table = table
        self.limiter = limiter
        self.policy = retry.policy_of(client) or retry.RETRY_POLICY

    def write(self, updates: Sequence[Update]) -> int:
        gone = 0
        batch: list[Update] = []
        size = 0
        for update in updates:
            weight = _size(update)
            if batch and (len(batch) == MAX_BATCH_ROWS or size + weight > MAX_BATCH_BYTES):
                gone += self._send(batch)
                batch, size = [], 0
            batch.append(update)
            size += weight
        if batch:
            gone += self._send(batch)
        return gone

    def _send(self, batch: list[Update]) -> int:
        self.limiter.acquire(len(batch))
        gone = 0
        attempt = 0
        pending = batch
        while pending:
            request = ts.BatchWriteRowRequest()
            condition = ts.Condition(ts.RowExistenceExpectation.EXPECT_EXIST)
            items = []
            for update in pending:
                columns: dict[str, Any] = {}
                if update.put:
                    columns["PUT"] = update.put
                if update.delete:
                    columns["DELETE_ALL"] = update.delete
                items.append(ts.UpdateRowItem(ts.Row(update.primary_key, columns), condition))
            request.add(ts.TableInBatchWriteRowItem(self.table, items))
            with adapter.service_errors(f"BatchWriteRow to {self.table!r}"):
                response = self.client.batch_write_row(request)
            _, failed = response.get_update()
            retry_rows = []
            error = None
            for item in failed:
                update = pending[item.index]
                if item.error_code == "OTSConditionCheckFail":
                    gone += 1  # deleted meanwhile: nothing to backfill
                    continue
                exc = ts.OTSServiceError(0, item.error_code, item.error_message)
                if not retry.retryable(exc, "BatchWriteRow") or attempt >= self.policy.max_retries:
                    raise WriteError(
                        f"row {format_key(update.primary_key)} of {self.table!r} could not be "
                        f"updated: {item.error_code} {item.error_message}"
                    )
                retry_rows.append(update)
                error = exc
            if retry_rows:
                time.sleep(self.policy.get_retry_delay(attempt, error, "BatchWriteRow"))
                attempt += 1
            pending = retry_rows
        return gone


def _size(update: Update) -> int:
    size = sum(len(str(v)) for _, v in update.primary_key)
    return size + sum(len(n) + (len(v) if isinstance(v, (str, bytes, bytearray)) else 8)
                      for n, v in update.put) + sum(len(n) for n in update.delete)


def backfill_split(
    spec: ConnectionSpec, job: BackfillJob, split: splits.Split, *, client: Any = None,
    limiter: RateLimiter | None = None,
) -> SplitResult:
    """The split task: read the range page by page from its checkpoint, run ``fn`` on every row,
    write what it changes, checkpoint after each page (next key, rows read, rows changed)."""
    client = client or spec.client()
    raw = RawClient(client)
    fn = functions.resolve(job.fn, "backfill function")
    state = checkpoints.load(client, job.id, split.index)
    resumed = state.status != checkpoints.PENDING
    if state.done:
        return SplitResult(split.index, state.rows, state.bytes, 0, resumed, changed=state.changed)
    writer = UpdateWriter(client, job.table.name, limiter or RateLimiter(job.max_rows_per_s))
    columns = job.columns_to_get

    def fetch(start: bytes, rows: int = PAGE_ROWS) -> tuple[bytes, bytes | None]:
        return read_page(raw, job.table.name, start, split.end_bytes, rows, 1, columns)

    with ThreadPoolExecutor(1, thread_name_prefix="backfill-read") as reader:
        ahead = reader.submit(fetch, state.next_start or split.start_bytes, FIRST_PAGE_ROWS)
        while True:
            buf, following = ahead.result()
            if following is not None:
                ahead = reader.submit(fetch, following)
            rows = decode_rows(buf)
            updates = [u for u in (update_of(fn, job, row) for row in rows) if u is not None]
            gone = writer.write(updates)
            state = attrs.evolve(
                state, status=DONE if following is None else RUNNING, next_start=following,
                rows=state.rows + len(rows), bytes=state.bytes + len(buf),
                changed=state.changed + len(updates) - gone,
            )
            checkpoints.save(client, job.id, state)
            if following is None:
                break
            if checkpoints.stop_requested(client, job.id):
                return SplitResult(split.index, state.rows, state.bytes, 0, resumed, True,
                                   changed=state.changed)
    return SplitResult(split.index, state.rows, state.bytes, 0, resumed, changed=state.changed)


# --- a data migration's job, kept in the state table ----------------------------------------------


def _row_key(key: str) -> list[tuple[str, Any]]:
    return [("kind", KIND), ("id", key)]


def start_or_resume(client: Any, key: str, table: Table, fn: str,
                    columns: Sequence[str] | None) -> BackfillJob:
    """The job of the data migration ``key`` (a revision's operation): the one a killed run
    left unfinished (its checkpoints say where it was), or a new one."""
    row = adapter.get_row(client, STATE_TABLE, _row_key(key))
    if row is not None and row.get("status") == RUNNING:
        return BackfillJob.from_json(row["job"])
    job = BackfillJob(f"bf-{uuid.uuid4().hex[:12]}", table, fn,
                      None if columns is None else tuple(columns))
    adapter.put_row(client, STATE_TABLE, _row_key(key), {"job": job.to_json(), "status": RUNNING})
    return job


def forget(client: Any, key: str) -> None:
    """Drop a finished data migration's job, ranges and checkpoints."""
    row = adapter.get_row(client, STATE_TABLE, _row_key(key))
    if row is None:
        return
    job = BackfillJob.from_json(row["job"])
    checkpoints.clear(client, job.id)
    adapter.delete_row(client, STATE_TABLE, [("kind", splits.KIND), ("id", job.id)])
    adapter.delete_row(client, STATE_TABLE, _row_key(key))


@attrs.frozen
class RunOptions:
    workers: int = 4
    dask: str | None = None
    max_rows_per_s: float | None = None
    processes: bool = False


def run(client: Any, spec: ConnectionSpec, job: BackfillJob, options: RunOptions,
        progress: Callable[[executors.BackfillProgress], None] | None = None) -> executors.BackfillResult:
    """Run ``job`` to its end (continuing from its checkpoints), ``options.workers`` ranges at
    a time, throttled to ``options.max_rows_per_s`` rows written per second."""
    job = attrs.evolve(job, max_rows_per_s=options.max_rows_per_s)
    split_list = splits.plan(client, job.id, job.table, options.workers)
    executor: executors.Executor = (
        executors.DaskExecutor(options.dask) if options.dask
        else executors.InProcessExecutor(options.workers, processes=options.processes))
    try:
        return executors.run_backfill(spec, job, split_list, executor, progress, task=backfill_split)
    finally:
        executor.close()
