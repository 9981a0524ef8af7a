"""Single-row operations: put, get, update, delete, idempotent create (sans-IO, see calls.py).

- Conditions: ``expect`` ("ignore", "exist", "not_exist") plus a column condition (``Attr``).
- Optimistic locking: a model with ``version="field"`` writes ``version + 1`` on the condition
  that the stored version is the one the row carries (absent for a new row); a failed check
  reads the current row and raises ``VersionConflict`` with it.
- Idempotent create: EXPECT_NOT_EXIST plus a request id stored in the row; when the condition
  fails (a retry of a create that did land, its answer lost), the row is read back and the create
  succeeds only if the row carries this request id. Lost answers are retried with backoff.
- Lost answers of other conditional writes: they are repeated by the operation, not the client
  (``retry.SINGLE_ATTEMPT``); a repeat that fails its condition reads the row and succeeds when
  the row is as the write leaves it (put: these cells; update: its puts and deletes; delete:
  no row). An increment is not repeated after a lost answer: the timeout reaches the caller.
- A table with ``allow_update=False`` takes no UpdateRow: an update of it is refused
  (``UpdateNotAllowed``) before any request.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tablestore import OTSServiceError
from tablestore import metadata as md

from tsmigrate.instance.retry import RETRY_POLICY, TsmigrateRetryPolicy, ambiguous
from tsmigrate.schema.model import Model
from tsmigrate.service.backoff import call_retryable, code_of, delay
from tsmigrate.service.calls import Call, Op, Sleep
from tsmigrate.service.codec import ModelCodec
from tsmigrate.service.conditions import Attr, Condition, sdk_condition
from tsmigrate.service.errors import (
    AlreadyExists,
    ConditionFailed,
    RowError,
    RowValueError,
    UpdateNotAllowed,
    VersionConflict,
)

EXPECT = {
    "ignore": md.RowExistenceExpectation.IGNORE,
    "exist": md.RowExistenceExpectation.EXPECT_EXIST,
    "not_exist": md.RowExistenceExpectation.EXPECT_NOT_EXIST,
}
CONDITION_FAILED = "OTSConditionCheckFail"
MISSING = "OTSObjectNotExist"


def check_month(codec: ModelCodec, table: str, exc: OTSServiceError) -> None:
    """A write to a family's month that has no table: say which, and how to get it."""
    if codec.family is not None and exc.code == MISSING:
        raise RowError(
            f"{codec.name}: the month table {table} does not exist; `tsmigrate apply` creates "
            f"the current month and {codec.family.ahead} ahead (Monthly(ahead=...))"
        ) from None


def expectation(expect: str) -> str:
    try:
        return EXPECT[expect]
    except KeyError:
        raise RowValueError(f"expect must be one of {', '.join(EXPECT)}, got {expect!r}") from None


def _and(a: Condition | None, b: Condition | None) -> Condition | None:
    if a is None:
        return b
    return a if b is None else a & b


Key = Sequence[tuple[str, Any]]  # a primary key as Model.key(...) returns it
RowTarget = Model | Mapping[str, Any] | Key


def key_or_fields(key: Key | None, fields: dict[str, Any]) -> RowTarget:
    """``get``'s key: ``Model.key(...)`` given positionally, or the key fields as keywords."""
    if key is None:
        return fields
    if fields:
        raise RowValueError(f"give the key or its fields, not both (got {key!r} and {fields!r})")
    return key


def located(codec: ModelCodec, target: RowTarget) -> tuple[dict[str, Any], str, list[tuple[str, Any]]]:
    """(field values, table, primary key) of a row given as a model instance, a mapping of its
    fields, or a primary key as ``Model.key(...)`` returns it."""
    if isinstance(target, Model):
        codec.check_model(target)
        values = target.__dict__
    elif isinstance(target, Mapping):
        values = dict(target)
    elif isinstance(target, (list, tuple)) and all(
        isinstance(cell, tuple) and len(cell) == 2 for cell in target
    ):
        return _from_key(codec, list(target))
    else:
        raise RowValueError(
            f"expected a {codec.name} row, a mapping of its key fields or {codec.name}.key(...), "
            f"got {target!r}"
        )
    return values, codec.table_for(values), codec.key(values)


def _from_key(codec: ModelCodec, key: list[tuple[str, Any]]) -> tuple[dict[str, Any], str, list]:
    """A primary key built by ``Model.key``: used as it is; its fields locate a family's month."""
    expected = [column.column for column in codec.key_columns]
    if [name for name, _ in key] != expected:
        raise RowValueError(
            f"{codec.name}: a primary key has the columns {expected}, in that order "
            f"(build it with {codec.name}.key(...)), got {key!r}"
        )
    values = codec.to_model(key, ()).__dict__
    return values, codec.table_for(values), key


def columns_to_get(codec: ModelCodec, fields: Iterable[str] | None) -> list[str] | None:
    if fields is None:
        return None
    return [codec.field(name).column for name in fields]


def version_guard(codec: ModelCodec, row: Model) -> tuple[str, Condition | None, int]:
    """For a versioned model: (expectation, condition, next version) guarding a write of ``row``."""
    current = row.__dict__.get(codec.version)
    if current is None:
        return md.RowExistenceExpectation.EXPECT_NOT_EXIST, None, 1
    return md.RowExistenceExpectation.EXPECT_EXIST, Attr(codec.version) == current, current + 1


def get_op(
    codec: ModelCodec, values: RowTarget, columns: Iterable[str] | None = None,
    table: str | None = None,
) -> Op[Model | None]:
    _, located_table, key = located(codec, values)
    table = table or located_table
    try:
        _, row, _ = yield Call("get_row", table, key, columns_to_get(codec, columns), None, 1)
    except OTSServiceError as exc:
        if codec.family is not None and exc.code == MISSING:
            return None  # a month without a table holds no rows
        raise
    if row is None or (not row.attribute_columns and not row.primary_key):
        return None
    return codec.to_model(row.primary_key, row.attribute_columns)


def put_op(
    codec: ModelCodec, row: Model, condition: Condition | None = None, expect: str = "ignore",
    retry: TsmigrateRetryPolicy = RETRY_POLICY,
) -> Op[Model]:
    codec.check_model(row)
    values = row.__dict__
    table = codec.table_for(values)
    key = codec.key(values)
    existence = expectation(expect)
    cells = codec.row_attributes(row)
    if codec.version:
        existence, guard, next_version = version_guard(codec, row)
        token = uuid.uuid4().hex
        cells = [c for c in cells if c[0] != codec.version_column]
        cells += [(codec.version_column, next_version), (codec.request_id_column, token)]
        call = Call("put_row", table, md.Row(key, cells),
                    md.Condition(existence, sdk_condition(_and(guard, condition), codec)))
        yield from _guarded(codec, call, table, key, values.get(codec.version), token, "put", retry)
        values[codec.version] = next_version
        return row
    yield from _conditional(
        codec, Call("put_row", table, md.Row(key, cells),
                    md.Condition(existence, sdk_condition(condition, codec)), once=True),
        table, key, "put", retry, repeatable=True,
        landed=lambda stored: stored == dict(cells),
    )
    return row


def _conditional(
    codec: ModelCodec, call: Call, table: str, key: list[tuple[str, Any]], action: str,
    retry: TsmigrateRetryPolicy, repeatable: bool,
    landed: Callable[[dict[str, Any] | None], bool],
) -> Op[None]:
    """A write without a version guard, sent once per attempt and repeated here rather than by
    the client's policy, so a failed condition is known to follow a lost answer or not. After
    one, the first attempt may have landed: the row is read, and the write stands when the row
    is as the write leaves it (``landed`` of its cells, None when absent). Otherwise
    ConditionFailed. ``repeatable``: repeating the write leaves the same row (no increments)."""

    def condition_failed(exc: OTSServiceError, uncertain: bool) -> Op[None]:
        if uncertain:
            _, stored, _ = yield Call("get_row", table, key, None, None, 1)
            present = stored is not None and bool(stored.primary_key or stored.attribute_columns)
            if landed({c[0]: c[1] for c in stored.attribute_columns} if present else None):
                return
        raise ConditionFailed(
            f"{codec.name} {action} {key}: the condition did not hold ({exc.message})",
            model=codec.name, key=key,
        ) from None

    yield from _repeated(codec, call, table, retry, repeatable, condition_failed)


def _guarded(
    codec: ModelCodec, call: Call, table: str, key: list[tuple[str, Any]], expected: int | None,
    token: str | None, action: str, retry: TsmigrateRetryPolicy,
) -> Op[None]:
    """A write guarded by the row's version: repeated after a lost answer (the guard makes a
    repeat harmless), as the client's retry policy may already have done. A failed guard is
    then this very write having landed when the row carries its token (put, update), or, for a
    delete, when the row is gone; otherwise VersionConflict (the stored version is another), or
    ConditionFailed (the version held: the caller's own condition did not)."""
    yield from _repeated(
        codec, call, table, retry, True,
        lambda exc, _: _check_guard(codec, table, key, expected, token, action, exc.message),
    )


def _repeated(
    codec: ModelCodec, call: Call, table: str, retry: TsmigrateRetryPolicy, repeatable: bool,
    condition_failed: Callable[[OTSServiceError, bool], Op[None]],
) -> Op[None]:
    """Send ``call`` until it is answered, repeating failures by the policy's rules (rejected
    ones always, ambiguous ones when ``repeatable``). A failed condition is the caller's to
    judge: ``condition_failed(error, uncertain)``, uncertain when an earlier attempt may have
    been done (its answer lost)."""
    attempt = 0
    uncertain = False
    while True:
        try:
            yield call
            return
        except OTSServiceError as exc:
            check_month(codec, table, exc)
            if exc.code == CONDITION_FAILED:
                yield from condition_failed(exc, uncertain)
                return
            failure: Exception = exc
        except Exception as exc:
            failure = exc
        if not call_retryable(failure, repeatable) or attempt >= retry.max_retries:
            raise failure
        uncertain = uncertain or ambiguous(failure)
        yield Sleep(delay(retry, attempt, code_of(failure)[0]))
        attempt += 1


def _check_guard(
    codec: ModelCodec, table: str, key: list[tuple[str, Any]], expected: int | None,
    token: str | None, action: str, message: str,
) -> Op[None]:
    _, stored, _ = yield Call("get_row", table, key, None, None, 1)
    if stored is None or not (stored.primary_key or stored.attribute_columns):
        if action == "delete":
            return  # gone: this delete landed (or another did; the row is gone either way)
        current = None
    else:
        cells = {cell[0]: cell[1] for cell in stored.attribute_columns}
        if token is not None and cells.get(codec.request_id_column) == token:
            return  # this write landed; its answer was lost and the repeat found it done
        current = codec.to_model(stored.primary_key, stored.attribute_columns)
    version = None if current is None else current.__dict__.get(codec.version)
    if current is not None and expected is not None and version == expected:
        raise ConditionFailed(
            f"{codec.name} {action} {key}: the condition did not hold ({message})",
            model=codec.name, key=key,
        )
    raise VersionConflict(
        f"{codec.name} {action}: expected version {expected}, the stored row has "
        f"{'no row' if current is None else f'version {version}'} (another writer changed it; "
        "reload and retry)",
        model=codec.name, key=key, expected=expected, current=current,
    )


def update_row_cells(
    codec: ModelCodec, set: Mapping[str, Any] | None, delete: Iterable[str] | None,
    increment: Mapping[str, int] | None,
) -> dict[str, list[Any]]:
    """UpdateRow cells: ``set`` (a None value deletes the column), ``delete``, ``increment``."""
    cells: dict[str, list[Any]] = {}
    puts, deletes, increments = [], [], []
    for name, value in (set or {}).items():
        if value is None:
            deletes.append(codec.field(name).column)
        else:
            puts.append(codec.value(name, value))
    deletes.extend(codec.field(name).column for name in (delete or ()))
    for name, amount in (increment or {}).items():
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise RowValueError(f"{codec.name}.{name}: increments are integers, got {amount!r}")
        column, _ = codec.value(name, amount)  # a whole number of the field's 64-bit range
        increments.append((column, amount))
    for name in (*(set or {}), *(delete or ()), *(increment or {})):
        if codec.field(name).column in codec.key_column_names:
            raise RowValueError(f"{codec.name}.{name} is part of the primary key and cannot be updated")
    if puts:
        cells[md.UpdateType.PUT] = puts
    if deletes:
        cells[md.UpdateType.DELETE_ALL] = deletes
    if increments:
        cells[md.UpdateType.INCREMENT] = increments
    return cells


def refuse_update(codec: ModelCodec, table: str) -> None:
    """Refuse an update of the model's table when it has allow_update=False, before any
    request (the service would answer with a bare OTSServiceError). This holds during a
    rewrite too, whichever table takes the writes then: code written for a model without
    updates must not come to rely on them before a switch. The routed client also refuses an
    update going to the rewrite's other table when that one takes none (routed.py)."""
    if not codec.allow_update:
        raise UpdateNotAllowed(codec.name, table)


def update_op(
    codec: ModelCodec, target: RowTarget, *, set: Mapping[str, Any] | None = None,
    delete: Iterable[str] | None = None, increment: Mapping[str, int] | None = None,
    condition: Condition | None = None, expect: str = "ignore",
    retry: TsmigrateRetryPolicy = RETRY_POLICY,
) -> Op[None]:
    values, table, key = located(codec, target)
    refuse_update(codec, table)
    cells = update_row_cells(codec, set, delete, increment)
    if not cells:
        raise RowValueError(
            f"{codec.name} update {key}: nothing to change (give set=, delete= or increment=)"
        )
    existence = expectation(expect)
    next_version = None
    if codec.version and isinstance(target, Model):
        existence, guard, next_version = version_guard(codec, target)
        token = uuid.uuid4().hex
        cells.setdefault(md.UpdateType.PUT, []).extend(
            [(codec.version_column, next_version), (codec.request_id_column, token)])
        call = Call("update_row", table, md.Row(key, cells),
                    md.Condition(existence, sdk_condition(_and(guard, condition), codec)))
        yield from _guarded(codec, call, table, key, values.get(codec.version), token, "update", retry)
    else:
        yield from _conditional(
            codec, Call("update_row", table, md.Row(key, cells),
                        md.Condition(existence, sdk_condition(condition, codec)), once=True),
            table, key, "update", retry, repeatable=md.UpdateType.INCREMENT not in cells,
            landed=lambda stored: stored is not None
            and all(stored.get(c) == v for c, v in cells.get(md.UpdateType.PUT, ()))
            and not any(c in stored for c in cells.get(md.UpdateType.DELETE_ALL, ())),
        )
    if isinstance(target, Model):
        for name, value in (set or {}).items():
            target.__dict__[name] = value
        for name in delete or ():
            target.__dict__[name] = None
        if next_version is not None:
            target.__dict__[codec.version] = next_version


def delete_op(
    codec: ModelCodec, target: RowTarget, *, condition: Condition | None = None,
    expect: str = "ignore", retry: TsmigrateRetryPolicy = RETRY_POLICY,
) -> Op[None]:
    values, table, key = located(codec, target)
    existence = expectation(expect)
    expected = values.get(codec.version) if codec.version and isinstance(target, Model) else None
    if expected is not None:
        guard = Attr(codec.version) == expected
        call = Call("delete_row", table, md.Row(key), md.Condition(
            md.RowExistenceExpectation.EXPECT_EXIST, sdk_condition(_and(guard, condition), codec)))
        yield from _guarded(codec, call, table, key, expected, None, "delete", retry)
        return
    yield from _conditional(
        codec, Call("delete_row", table, md.Row(key),
                    md.Condition(existence, sdk_condition(condition, codec)), once=True),
        table, key, "delete", retry, repeatable=True, landed=lambda stored: stored is None,
    )


def create_op(
    codec: ModelCodec, row: Model, request_id: str | None = None,
    retry: TsmigrateRetryPolicy = RETRY_POLICY,
) -> Op[Model]:
    """Create ``row`` exactly once, however often the request is repeated (same request id)."""
    codec.check_model(row)
    values = row.__dict__
    table = codec.table_for(values)
    key = codec.key(values)
    request_id = request_id or uuid.uuid4().hex
    cells = codec.row_attributes(row)
    if codec.version:
        cells = [c for c in cells if c[0] != codec.version_column]
        cells.append((codec.version_column, 1))
    cells.append((codec.request_id_column, request_id))
    put = md.Row(key, cells)
    condition = md.Condition(md.RowExistenceExpectation.EXPECT_NOT_EXIST)
    attempt = 0
    while True:
        try:
            yield Call("put_row", table, put, condition)
            break
        except OTSServiceError as exc:
            check_month(codec, table, exc)
            if exc.code == CONDITION_FAILED:
                _, stored, _ = yield Call(
                    "get_row", table, key, [codec.request_id_column], None, 1
                )
                cells_read = {c[0]: c[1] for c in (stored.attribute_columns if stored else ())}
                if cells_read.get(codec.request_id_column) == request_id:
                    break  # an earlier attempt of this very request landed
                current = yield from get_op(codec, values, table=table)
                raise AlreadyExists(
                    f"{codec.name} {key} already exists (created by another request)",
                    model=codec.name, key=key, current=current,
                ) from None
            if not call_retryable(exc, True) or attempt >= retry.max_retries:
                raise
            failure = exc
        except Exception as exc:
            # The request id makes a repeat harmless, so even a lost answer is retried.
            if not call_retryable(exc, True) or attempt >= retry.max_retries:
                raise
            failure = exc
        yield Sleep(delay(retry, attempt, code_of(failure)[0]))
        attempt += 1
    if codec.version:
        values[codec.version] = 1
    return row
