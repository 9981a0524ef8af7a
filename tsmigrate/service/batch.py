"""Batch reads and writes: chunked to the service's limits, failed rows retried, results per row.

- BatchWriteRow takes at most 200 rows and 4 MB; BatchGetRow at most 100 rows. Rows are taken
  lazily from the caller's iterables, so a batch of any size keeps memory flat.
- Only the rows that failed with a retryable error (throttling, a busy partition) are sent again,
  after a capped, jittered backoff; rows that succeeded are never resent. The failed rows wait on
  their own: other requests keep going meanwhile, and the rows go again with a later request
  once their backoff is over. A later row for a key still being retried waits for it, and a
  request carries one write per key, so writes to one key keep their order.
- This loop, not the client's policy, repeats requests (``Call(once=True)``): a refused request
  backs off like failed rows; after a lost answer (a timeout) only rows that are safe to send
  twice go again, and a version-guarded row whose repeat fails its guard is read back.
- The send rate adapts to throttling (``backoff.SendRate``, AIMD): requests that come back
  largely throttled slow the batch down, the others speed it up again.
- ``progress(done, total)`` is called after each request, if given.
- A whole request refused as invalid is split into single rows, so one bad row does not take
  199 good ones down with it.
- The result counts what was written and lists, row by row, what finally failed.

Rows of a table family go to the month table of each row.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from functools import partial
from itertools import chain
from typing import Any

import attrs
from tablestore import OTSServiceError
from tablestore import metadata as md

from tsmigrate.instance.retry import RETRY_POLICY, THROTTLING_CODES, TsmigrateRetryPolicy
from tsmigrate.schema.model import Model
from tsmigrate.service.backoff import (
    RetryQueue,
    SendRate,
    call_retryable,
    code_of,
    delay,
    row_retryable,
)
from tsmigrate.service.calls import Call, Op, Progress, Raw, Sleep
from tsmigrate.service.codec import ModelCodec
from tsmigrate.service.conditions import Attr, Condition, sdk_condition
from tsmigrate.service.errors import BatchError
from tsmigrate.service.rows import (
    CONDITION_FAILED,
    RowTarget,
    columns_to_get,
    expectation,
    located,
    refuse_update,
    update_row_cells,
    version_guard,
)
from tsmigrate.wire import rows as wire

WRITE_ROWS = 200
WRITE_BYTES = 4 * 1024 * 1024
GET_ROWS = 100
# Answers that say the service is overloaded: the batch slows down (backoff.SendRate).
_THROTTLED = THROTTLING_CODES | {"OTSQuotaExhausted"}
# Rows backing off or held before the batch stops reading new ones (memory stays flat).
_MOST_WAITING = 10 * WRITE_ROWS
# Room for what the estimate leaves out (PlainBuffer tags, checksums, the request's framing).
_BYTES_BUDGET = int(WRITE_BYTES * 0.9)


def _ident(table: str, key: Sequence[tuple[str, Any]]) -> tuple[Any, ...]:
    ident = (table, *key)
    try:
        hash(ident)
    except TypeError:  # a BINARY key value is a bytearray, as the SDK sends it
        ident = (table, *((n, bytes(v) if isinstance(v, bytearray) else v) for n, v in key))
    return ident


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


def _size(cells: Sequence[Any]) -> int:
    """An upper estimate of the encoded size of cells (names, values, per-cell framing)."""
    size = 20 * len(cells)  # a cell's framing, and the 8 bytes of a number
    for cell in cells:
        size += len(cell[0])
        if len(cell) > 1:
            value = cell[1]
            kind = value.__class__
            if kind is str:
                size += len(value) if value.isascii() else 4 * len(value)
            elif kind is bytes or kind is bytearray:
                size += len(value)
    return size


class WriteItem:
    __slots__ = ("action", "after", "attempts", "encoded", "error", "guarded", "ident", "key",
                 "request", "size", "source", "table", "token")

    def __init__(self, action: str, source: Any, table: str, key: list[tuple[str, Any]],
                 request: md.RowItem, cells: Sequence[Any], after: Any = None,
                 token: str | None = None, guarded: bool = False):
        self.action = action
        self.source = source
        self.table = table
        self.key = key
        self.request = request
        self.encoded: bytes | None = None  # the request's row as sent (wire.batch_row), once built
        self.attempts = 0
        self.error = ("", "")  # the last retryable error, reported if retries run out
        self.after = after  # applied to the source row once written (a new version)
        self.size = 16 + _size(key) + _size(cells)
        self.ident = _ident(table, key)  # the row's table and key: one write per key at a time
        # A version-guarded write: its token (put, update; None for a delete) tells whether a
        # failed guard is this row's own earlier attempt, whose answer was lost.
        self.guarded = guarded or token is not None
        self.token = token

    @property
    def repeatable(self) -> bool:
        """Sending it twice leaves the same row (not so an increment). Asked of failed rows only."""
        return not (isinstance(self.request, md.UpdateRowItem)
                    and md.UpdateType.INCREMENT in self.request.row.attribute_columns)


_IGNORE = md.Condition(md.RowExistenceExpectation.IGNORE)
_NO_ROW = object()  # an iterable's end, told apart from any value it may hold


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
    refuse_update(codec, table)
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
    # map, not a generator of our own: one Python frame less per row.
    return chain(map(partial(_put_item, codec), puts), map(partial(_update_item, codec), updates),
                 map(partial(_delete_item, codec), deletes))


def _by_table(chunk: list[WriteItem]) -> dict[str, list[WriteItem]]:
    by_table: dict[str, list[WriteItem]] = {}
    for item in chunk:
        by_table.setdefault(item.table, []).append(item)
    return by_table


def _encoded(items: list[WriteItem]) -> list[bytes]:
    rows = []
    for item in items:
        encoded = item.encoded
        if encoded is None:
            encoded = item.encoded = wire.batch_row(item.request)
        rows.append(encoded)
    return rows


def _write_step(by_table: dict[str, list[WriteItem]]) -> Raw:
    """The BatchWriteRow of these rows, sent once (this loop retries): encoded here, or as the
    SDK's request when a rewrite's phase has the routed client translate it."""

    def sdk_request() -> md.BatchWriteRowRequest:
        request = md.BatchWriteRowRequest()
        for table, items in by_table.items():
            request.add(md.TableInBatchWriteRowItem(table, [i.request for i in items]))
        return request

    body = wire.batch_write_request([(table, _encoded(items)) for table, items in by_table.items()])
    return Raw("BatchWriteRow", body, tables=list(by_table), sdk_request=sdk_request, once=True)


def write_op(
    codec: ModelCodec, puts: Iterable[Model] = (), updates: Iterable[Update] = (),
    deletes: Iterable[Any] = (), retry: TsmigrateRetryPolicy = RETRY_POLICY,
    max_rows: int = WRITE_ROWS, max_bytes: int = _BYTES_BUDGET, progress: Progress | None = None,
    routed: bool = False,
) -> Op[BatchResult]:
    """``routed``: the client routes the model's writes during a rewrite (routed.py) and is
    asked, before the first request, whether the table it writes takes updates."""
    total = None
    if progress is not None and all(isinstance(rows, Sized) for rows in (puts, updates, deletes)):
        total = sum(len(rows) for rows in (puts, updates, deletes))  # type: ignore[arg-type]
    if routed or not codec.allow_update:
        # An update the table refuses stops the batch before any row of it is sent (puts
        # come first, and would be written before the update is reached).
        pending = iter(updates)
        first = next(pending, _NO_ROW)
        if first is not _NO_ROW:
            _update_item(codec, first)  # checked as it will be sent: refused by the model's table
            if routed:
                yield Call("refuse_update", codec.table)
            updates = chain((first,), pending)
    return (yield from write_items_op(codec, _items(codec, puts, updates, deletes), retry,
                                      max_rows, max_bytes, progress, total))


def write_items_op(
    codec: ModelCodec | None, source: Iterator[WriteItem], retry: TsmigrateRetryPolicy = RETRY_POLICY,
    max_rows: int = WRITE_ROWS, max_bytes: int = _BYTES_BUDGET, progress: Progress | None = None,
    total: int | None = None,
) -> Op[BatchResult]:
    """Write prepared rows (``codec`` sets the version of versioned rows; None for raw rows).
    ``progress(rows done, total)`` after each request (done: written or finally failed)."""
    result = BatchResult()
    carry: deque[WriteItem] = deque()  # rows to send first: retries due, a row that did not fit
    alone: deque[WriteItem] = deque()  # rows of a refused request, resent one per request
    backing_off: RetryQueue[WriteItem] = RetryQueue()
    rate = SendRate()
    held: deque[WriteItem] = deque()  # later rows for a key whose earlier row is unsettled
    held_keys: Counter[tuple[Any, ...]] = Counter()
    retrying: set[tuple[Any, ...]] = set()  # keys of rows waiting for another attempt

    def fail(item: WriteItem, code: str, message: str) -> None:
        result.failures.append(Failure(item.action, item.source, item.table, item.key, code,
                                       message, item.attempts))

    def hold(item: WriteItem) -> None:
        held.append(item)
        held_keys[item.ident] += 1

    def release() -> list[WriteItem]:
        """Held rows free to go, each the first held for its key (writes keep their order)."""
        free: list[WriteItem] = []
        keys: set[tuple[Any, ...]] = set()
        blocked: set[tuple[Any, ...]] = set()
        for item in held:
            key = item.ident
            if key not in blocked and key not in retrying and key not in keys:
                free.append(item)
                keys.add(key)
            blocked.add(key)
        for item in free:
            held.remove(item)
            held_keys[item.ident] -= 1
            if not held_keys[item.ident]:
                del held_keys[item.ident]
        return free

    def next_chunk() -> list[WriteItem]:
        if alone:
            return [alone.popleft()]
        if held and not carry:  # (a row carried may share its key with a held one)
            carry.extend(release())
        if backing_off:
            carry.extend(backing_off.due(time.monotonic()))
        chunk: list[WriteItem] = []
        keys: set[tuple[Any, ...]] = set()  # one write per key and request
        size = 0
        # Rows waiting (a service refusing most rows, many writes to one key): no reading on.
        reading = backing_off.rows + len(held) < _MOST_WAITING
        while len(chunk) < max_rows:
            if carry:
                item = carry.popleft()
            elif reading:
                item = next(source, None)
                if item is None:
                    break
                ident = item.ident
                if ident in keys or (retrying and ident in retrying) or (held and ident in held_keys):
                    hold(item)
                    reading = backing_off.rows + len(held) < _MOST_WAITING
                    continue
            else:
                break
            if chunk and size + item.size > max_bytes:
                carry.appendleft(item)
                break
            chunk.append(item)
            keys.add(item.ident)
            size += item.size
        return chunk

    def settled(item: WriteItem) -> None:
        if retrying:
            retrying.discard(item.ident)

    while True:
        chunk = next_chunk()
        if not chunk:
            if backing_off:  # only rows backing off are left: wait for the first of them
                yield Sleep(max(0.0, backing_off.next_ready() - time.monotonic()))
                continue
            if held:  # rows held for keys that are settled now
                retrying.clear()
                continue
            return result
        pause = rate.wait(time.monotonic())
        if pause:
            yield Sleep(pause)
        by_table = _by_table(chunk)
        again: list[WriteItem] = []
        throttled, refused = 0, False
        guard_failed: list[tuple[WriteItem, str]] = []
        sent_at = time.monotonic()
        try:
            # This loop retries, not the client: rows of a refused request back off while
            # other requests go, and only repeatable rows are sent again after a lost answer.
            response = yield _write_step(by_table)
        except Exception as exc:
            code, message = code_of(exc)
            if call_retryable(exc, True):
                refused = code in _THROTTLED
                throttled = len(chunk) if refused else 0
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
            answers = wire.batch_answers(response, list(by_table))
            for table, items in by_table.items():
                for item, (ok, error_code, error_message) in zip(items, answers[table], strict=True):
                    item.attempts += 1
                    if ok:
                        result.written += 1
                        if item.after is not None and codec is not None:
                            row = item.source.target if item.action == "update" else item.source
                            row.__dict__[codec.version] = item.after
                        if retrying:
                            retrying.discard(item.ident)
                    elif error_code == CONDITION_FAILED and item.guarded:
                        guard_failed.append((item, error_message))
                    elif row_retryable(error_code, item.repeatable):
                        item.error = (error_code, error_message)
                        again.append(item)
                        throttled += error_code in _THROTTLED
                    else:
                        fail(item, error_code, error_message)
                        settled(item)
        now = time.monotonic()
        rate.answered(len(chunk), throttled, sent_at, now, refused)
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
        if again:
            _back_off(again, retry, backing_off, now, retrying, fail, settled)
        if progress is not None:
            progress(result.written + len(result.failures), total)


def _back_off(again: list[WriteItem], retry: TsmigrateRetryPolicy, queue: RetryQueue[WriteItem],
              now: float, retrying: set[tuple[Any, ...]],
              fail: Callable[[WriteItem, str, str], None],
              settled: Callable[[WriteItem], None]) -> None:
    """Queue rows to send again, each group of rows on the same attempt after the policy's
    capped, jittered delay for it; rows out of attempts fail. The delay is the policy's base
    one, throttled or not: the batch answers throttling by its send rate (``SendRate``), and
    a row's longer wait would only hold up the end of the batch."""
    groups: dict[int, list[WriteItem]] = {}
    for item in again:
        if item.attempts > retry.max_retries:
            fail(item, item.error[0], f"{item.error[1]} (still failing after {item.attempts} attempts)")
            settled(item)
        else:
            retrying.add(item.ident)
            groups.setdefault(item.attempts, []).append(item)
    for attempts, group in groups.items():
        queue.add(group, now + delay(retry, attempts - 1, None))


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
