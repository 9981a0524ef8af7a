"""Batch reads and writes: chunked to the service's limits, failed rows retried, results per row.

- BatchWriteRow takes at most 200 rows and 4 MB; BatchGetRow at most 100 rows. Rows are taken
  lazily from the caller's iterables, so a batch of any size keeps memory flat.
- Only the rows that failed with a retryable error (throttling, a busy partition) are sent again,
  after a capped, jittered backoff; rows that succeeded are never resent. A later row for a key
  still being retried waits for it, and a request carries one write per key, so writes to one
  key keep their order.
- A whole request refused as invalid is split into single rows, so one bad row does not take
  199 good ones down with it.
- The result counts what was written and lists, row by row, what finally failed.

Rows of a table family go to the month table of each row.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import attrs
from tablestore import OTSServiceError
from tablestore import metadata as md

from tsmigrate.model import Model
from tsmigrate.retry import RETRY_POLICY, TsmigrateRetryPolicy
from tsmigrate.service.backoff import call_retryable, code_of, delay, row_retryable
from tsmigrate.service.calls import Call, Op, Sleep
from tsmigrate.service.codec import ModelCodec
from tsmigrate.service.conditions import Attr, Condition, sdk_condition
from tsmigrate.service.errors import BatchError
from tsmigrate.service.rows import (
    CONDITION_FAILED,
    RowTarget,
    columns_to_get,
    expectation,
    located,
    update_row_cells,
    version_guard,
)

WRITE_ROWS = 200
WRITE_BYTES = 4 * 1024 * 1024
GET_ROWS = 100
# Room for what the estimate leaves out (PlainBuffer tags, checksums, the request's framing).
_BYTES_BUDGET = int(WRITE_BYTES * 0.9)


@attrs.frozen
class Update:
    """One row of a batch update: the row (or its key fields) and the changes."""

    target: RowTarget
    set: Mapping[str, Any] | None = None
    delete: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    increment: Mapping[str, int] | None = None
    condition: Condition | None = None
    expect: str = "ignore"


@attrs.frozen
class Failure:
    """A row that finally failed: what was asked, the key, the service's error, the attempts."""

    action: str  # put, update, delete, get
    row: Any
    table: str
    key: list[tuple[str, Any]]
    error_code: str
    error_message: str
    attempts: int


@attrs.define
class BatchResult:
    written: int = 0
    failures: list[Failure] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def raise_for_failures(self) -> BatchResult:
        if self.failures:
            raise BatchError(self.failures)
        return self


@attrs.define
class BatchGetResult:
    """``rows[i]`` is the row of the i-th key (None: no such row, or it failed: see failures)."""

    rows: list[Model | None]
    failures: list[Failure] = attrs.field(factory=list)

    def __iter__(self) -> Iterator[Model | None]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def raise_for_failures(self) -> BatchGetResult:
        if self.failures:
            raise BatchError(self.failures)
        return self


def _size(cells: Iterable[Any]) -> int:
    """An upper estimate of the encoded size of cells (names, values, per-cell framing)."""
    size = 0
    for cell in cells:
        size += len(cell[0]) + 12
        if len(cell) > 1:
            value = cell[1]
            kind = type(value)
            if kind is str:
                size += len(value) if value.isascii() else 4 * len(value)
            elif kind is bytes or kind is bytearray:
                size += len(value)
            else:
                size += 8
    return size


class WriteItem:
    __slots__ = ("action", "after", "attempts", "error", "guarded", "identity", "key", "repeatable",
                 "request", "size", "source", "table", "token")

    def __init__(self, action: str, source: Any, table: str, key: list[tuple[str, Any]],
                 request: md.RowItem, cells: Iterable[Any], after: Any = None,
                 token: str | None = None, guarded: bool = False):
        self.action = action
        self.source = source
        self.table = table
        self.key = key
        self.request = request
        self.attempts = 0
        self.error = ("", "")  # the last retryable error, reported if retries run out
        self.after = after  # applied to the source row once written (a new version)
        # Sending it twice leaves the same row (not so an increment).
        self.repeatable = not (isinstance(request, md.UpdateRowItem)
                               and md.UpdateType.INCREMENT in request.row.attribute_columns)
        self.size = 16 + _size(key) + _size(cells)
        self.identity: tuple[Any, ...] | None = None
        # A version-guarded write: its token (put, update; None for a delete) tells whether a
        # failed guard is this row's own earlier attempt, whose answer was lost.
        self.guarded = guarded or token is not None
        self.token = token

    def ident(self) -> tuple[Any, ...]:
        if self.identity is None:
            self.identity = (self.table, *(v for _, v in self.key))
        return self.identity


_IGNORE = md.Condition(md.RowExistenceExpectation.IGNORE)


def raw_put(table: str, primary_key: list[tuple[str, Any]], cells: list[Any], source: Any = None
            ) -> WriteItem:
    """A put of cells as given (timestamps included), for rows that are not model instances."""
    return WriteItem("put", source, table, primary_key,
                     md.PutRowItem(md.Row(primary_key, cells), _IGNORE), cells)


def _put_item(codec: ModelCodec, row: Model) -> WriteItem:
    codec.check_model(row)
    values = row.__dict__
    key = codec.key(values)
    cells = codec.row_attributes(row)
    condition = _IGNORE
    after = None
    token = None
    if codec.version:
        existence, guard, after = version_guard(codec, row)
        token = uuid.uuid4().hex
        cells = [c for c in cells if c[0] != codec.version_column]
        cells += [(codec.version_column, after), (codec.request_id_column, token)]
        condition = md.Condition(existence, sdk_condition(guard, codec))
    return WriteItem("put", row, codec.table_for(values), key,
                     md.PutRowItem(md.Row(key, cells), condition), cells, after, token)


def _update_item(codec: ModelCodec, update: Update) -> WriteItem:
    if not isinstance(update, Update):
        raise TypeError(f"batch updates are Update(row, set=..., increment=...) values, got {update!r}")
    _, table, key = located(codec, update.target)
    cells = update_row_cells(codec, update.set, update.delete, update.increment)
    existence, guard, after, token = expectation(update.expect), update.condition, None, None
    if codec.version and isinstance(update.target, Model):  # optimistic locking, as update()
        existence, version, after = version_guard(codec, update.target)
        guard = version if guard is None or version is None else version & guard
        token = uuid.uuid4().hex
        cells.setdefault(md.UpdateType.PUT, []).extend(
            [(codec.version_column, after), (codec.request_id_column, token)])
    condition = md.Condition(existence, sdk_condition(guard, codec))
    flat = [c if isinstance(c, tuple) else (c,) for group in cells.values() for c in group]
    return WriteItem("update", update, table, key,
                     md.UpdateRowItem(md.Row(key, cells), condition), flat, after, token)


def _delete_item(codec: ModelCodec, target: RowTarget) -> WriteItem:
    _, table, key = located(codec, target)
    condition = _IGNORE
    if codec.version and isinstance(target, Model) and target.__dict__.get(codec.version) is not None:
        # Optimistic locking, as delete(): only the version the row carries is deleted.
        condition = md.Condition(md.RowExistenceExpectation.EXPECT_EXIST, sdk_condition(
            Attr(codec.version) == target.__dict__[codec.version], codec))
        return WriteItem("delete", target, table, key, md.DeleteRowItem(md.Row(key), condition), (),
                         guarded=True)
    return WriteItem("delete", target, table, key, md.DeleteRowItem(md.Row(key), condition), ())


def _items(codec: ModelCodec, puts: Iterable[Model], updates: Iterable[Update],
           deletes: Iterable[Any]) -> Iterator[WriteItem]:
    for row in puts:
        yield _put_item(codec, row)
    for update in updates:
        yield _update_item(codec, update)
    for target in deletes:
        yield _delete_item(codec, target)


def _write_request(chunk: list[WriteItem]) -> tuple[md.BatchWriteRowRequest, dict[str, list[WriteItem]]]:
    by_table: dict[str, list[WriteItem]] = {}
    for item in chunk:
        by_table.setdefault(item.table, []).append(item)
    request = md.BatchWriteRowRequest()
    for table, items in by_table.items():
        request.add(md.TableInBatchWriteRowItem(table, [i.request for i in items]))
    return request, by_table


def write_op(
    codec: ModelCodec, puts: Iterable[Model] = (), updates: Iterable[Update] = (),
    deletes: Iterable[Any] = (), retry: TsmigrateRetryPolicy = RETRY_POLICY,
    max_rows: int = WRITE_ROWS, max_bytes: int = _BYTES_BUDGET,
) -> Op[BatchResult]:
    return (yield from write_items_op(codec, _items(codec, puts, updates, deletes), retry,
                                      max_rows, max_bytes))


def write_items_op(
    codec: ModelCodec | None, source: Iterator[WriteItem], retry: TsmigrateRetryPolicy = RETRY_POLICY,
    max_rows: int = WRITE_ROWS, max_bytes: int = _BYTES_BUDGET,
) -> Op[BatchResult]:
    """Write prepared rows (``codec`` sets the version of versioned rows; None for raw rows)."""
    result = BatchResult()
    carry: deque[WriteItem] = deque()  # rows to send first: retries, and a row that did not fit
    alone: deque[WriteItem] = deque()  # rows of a refused request, resent one per request
    held: deque[WriteItem] = deque()  # later rows for a key whose earlier row is being retried
    retrying: set[tuple[Any, ...]] = set()  # keys of rows waiting for another attempt

    def fail(item: WriteItem, code: str, message: str) -> None:
        result.failures.append(Failure(item.action, item.source, item.table, item.key, code,
                                       message, item.attempts))

    def next_chunk() -> list[WriteItem]:
        if alone:
            return [alone.popleft()]
        chunk: list[WriteItem] = []
        keys: set[tuple[Any, ...]] = set()  # one write per key and request
        size = 0
        while len(chunk) < max_rows:
            if carry:
                item = carry.popleft()
            elif held and held[0].ident() not in retrying and held[0].ident() not in keys:
                item = held.popleft()
            else:
                item = next(source, None)
                if item is None:
                    break
                if item.ident() in keys or (retrying and item.ident() in retrying):
                    held.append(item)
                    continue
            if chunk and size + item.size > max_bytes:
                carry.appendleft(item)
                break
            chunk.append(item)
            keys.add(item.ident())
            size += item.size
        return chunk

    def settled(item: WriteItem) -> None:
        if retrying:
            retrying.discard(item.ident())

    while True:
        chunk = next_chunk()
        if not chunk:
            if held:  # rows held for keys that are settled now
                retrying.clear()
                continue
            return result
        request, by_table = _write_request(chunk)
        again: list[WriteItem] = []
        guard_failed: list[tuple[WriteItem, str]] = []
        try:
            response = yield Call("batch_write_row", request)
        except Exception as exc:
            code, message = code_of(exc)
            if call_retryable(exc, True):
                again = _count_attempt(chunk, code, message)
                # Lost answers: an increment may have been applied; never apply it twice.
                for item in [i for i in again if not call_retryable(exc, i.repeatable)]:
                    fail(item, code, f"{message} (the update may or may not have been applied)")
                    settled(item)
                again = [i for i in again if call_retryable(exc, i.repeatable)]
            elif not isinstance(exc, OTSServiceError):
                raise
            elif len(chunk) > 1:
                alone.extend(chunk)  # find the row the service refused
            else:
                chunk[0].attempts += 1
                fail(chunk[0], code, message)
                settled(chunk[0])
        else:
            for table, items in by_table.items():
                answers = (
                    response.table_of_put.get(table, []) + response.table_of_update.get(table, [])
                    + response.table_of_delete.get(table, [])
                )
                answers.sort(key=lambda r: r.index)
                for item, answer in zip(items, answers, strict=True):
                    item.attempts += 1
                    if answer.is_ok:
                        result.written += 1
                        if item.after is not None and codec is not None:
                            row = item.source.target if item.action == "update" else item.source
                            row.__dict__[codec.version] = item.after
                        settled(item)
                    elif answer.error_code == CONDITION_FAILED and item.guarded:
                        guard_failed.append((item, answer.error_message))
                    elif row_retryable(answer.error_code, item.repeatable):
                        item.error = (answer.error_code, answer.error_message)
                        again.append(item)
                    else:
                        fail(item, answer.error_code, answer.error_message)
                        settled(item)
        for item, message in guard_failed:
            if (yield from _landed(codec, item)):
                result.written += 1
                assert codec is not None  # guarded rows are model rows
                row = item.source.target if item.action == "update" else item.source
                if item.after is not None:
                    row.__dict__[codec.version] = item.after
            else:
                fail(item, CONDITION_FAILED, message)
            settled(item)
        for item in [i for i in again if i.attempts > retry.max_retries]:
            fail(item, item.error[0], f"{item.error[1]} (still failing after {item.attempts} attempts)")
            settled(item)
        again = [i for i in again if i.attempts <= retry.max_retries]
        if again:
            for item in again:
                retrying.add(item.ident())
            carry.extend(again)
            yield Sleep(delay(retry, max(i.attempts for i in again) - 1, again[0].error[0]))


def _landed(codec: ModelCodec | None, item: WriteItem) -> Op[bool]:
    """Whether a version-guarded row whose guard failed had landed already: an earlier attempt,
    whose answer was lost, was repeated (here or by the client's retry policy). A put or update
    landed when the row carries its token; a versioned delete when the row is gone."""
    assert codec is not None
    columns = None if item.token is None else [codec.request_id_column]
    try:
        _, stored, _ = yield Call("get_row", item.table, item.key, columns, None, 1)
    except Exception:
        return False  # cannot tell: report the failed guard
    present = stored is not None and bool(stored.primary_key or stored.attribute_columns)
    if item.token is None:
        return not present
    cells = {cell[0]: cell[1] for cell in (stored.attribute_columns if present else ())}
    return cells.get(codec.request_id_column) == item.token


def _count_attempt(chunk: list[WriteItem], code: str, message: str) -> list[WriteItem]:
    for item in chunk:
        item.attempts += 1
        item.error = (code, message)
    return chunk


def get_op(
    codec: ModelCodec, targets: Iterable[RowTarget],
    columns: Iterable[str] | None = None, retry: TsmigrateRetryPolicy = RETRY_POLICY,
    max_rows: int = GET_ROWS,
) -> Op[BatchGetResult]:
    keyed = []
    for target in targets:
        _, table, key = located(codec, target)
        keyed.append((target, table, key))
    return (yield from get_keys_op(codec, keyed, columns, retry, max_rows))


def get_keys_op(
    codec: ModelCodec, keyed: list[tuple[Any, str, list[tuple[str, Any]]]],
    columns: Iterable[str] | None = None, retry: TsmigrateRetryPolicy = RETRY_POLICY,
    max_rows: int = GET_ROWS,
) -> Op[BatchGetResult]:
    """Batch get of ready keys: (what the caller asked for, table, primary key) each."""
    wanted = columns_to_get(codec, columns)
    rows: list[Model | None] = [None] * len(keyed)
    failures: list[Failure] = []
    pending = deque(range(len(keyed)))
    attempts = [0] * len(keyed)
    while pending:
        chunk = [pending.popleft() for _ in range(min(max_rows, len(pending)))]
        by_table: dict[str, list[int]] = {}
        for position in chunk:
            by_table.setdefault(keyed[position][1], []).append(position)
        request = md.BatchGetRowRequest()
        for table, positions in by_table.items():
            request.add(md.TableInBatchGetRowItem(
                table, [keyed[p][2] for p in positions], wanted, None, 1))
        again: list[int] = []
        try:
            response = yield Call("batch_get_row", request)
        except Exception as exc:
            if not call_retryable(exc, True):
                raise
            again = chunk
            code, message = code_of(exc)
        else:
            for table, positions in by_table.items():
                for position, item in zip(positions, response.get_result_by_table(table), strict=True):
                    if item.is_ok:
                        row = item.row
                        if row is not None and (row.primary_key or row.attribute_columns):
                            rows[position] = codec.to_model(row.primary_key, row.attribute_columns)
                    elif row_retryable(item.error_code, True):
                        again.append(position)
                        code, message = item.error_code, item.error_message
                    else:
                        attempts[position] += 1
                        failures.append(Failure("get", keyed[position][0], table, keyed[position][2],
                                                item.error_code, item.error_message, attempts[position]))
        retried = []
        for position in again:
            attempts[position] += 1
            if attempts[position] > retry.max_retries:
                target, table, key = keyed[position]
                failures.append(Failure("get", target, table, key, code, message, attempts[position]))
            else:
                retried.append(position)
        if retried:
            pending.extendleft(reversed(retried))
            yield Sleep(delay(retry, max(attempts[p] for p in retried) - 1, code))
    return BatchGetResult(rows, failures)
