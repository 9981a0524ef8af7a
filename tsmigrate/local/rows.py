"""Row APIs: PutRow, GetRow, UpdateRow, DeleteRow, BatchGetRow, BatchWriteRow, GetRange.

Every write runs in one storage transaction (a batch row in its own savepoint), so a request or
batch row that fails leaves nothing behind. After each row mutation the server's mutation hooks run
(the attachment point for secondary indexes and streams).

Timestamps: a cell written without one gets the server's clock in ms, read when the request holds
the storage (so in commit order). A cell version *is* its timestamp: two writes of one cell in the
same millisecond make one version, holding the later write's value (as an explicit timestamp equal
to an existing version replaces it). An increment adds to the cell's newest version and is stamped
no older than it, so it always becomes the newest version (replacing it within one millisecond):
every acknowledged increment counts, however writes interleave.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local import fastrow, keycodec, nativerow, rowdata, transactions
from tsmigrate.local.context import RowChange
from tsmigrate.local.errors import OTSError, condition_failed, invalid, invalid_pk
from tsmigrate.local.filters import compile_filter
from tsmigrate.local.indexes import readable_table, writable_table
from tsmigrate.local.model import PK_BINARY, PK_BOOLEAN, PK_INTEGER, PK_STRING, TableInfo
from tsmigrate.local.rowdata import ReadSpec
from tsmigrate.local.storage import Cells, StoredRow
from tsmigrate.local.table_rules import NAME_RE
from tsmigrate.wire.plainbuffer import (
    AUTO_INCREMENT,
    HEADER,
    INF_MAX,
    INF_MIN,
    OP_DELETE_ALL,
    OP_DELETE_ONE,
    OP_INCREMENT,
    Cell,
    PlainBufferError,
    Row,
    assemble_row,
    decode_primary_key,
    decode_row,
    encode_cell,
    encode_primary_key_cells,
    logical_size,
    value_size,
)

if TYPE_CHECKING:
    from tsmigrate.local.context import Context, MutationHook

MAX_PK_LENGTH = 1024
MAX_VALUE_LENGTH = 2 * 1024 * 1024
MAX_COLUMNS_PER_WRITE = 1024
MAX_COLUMNS_TO_GET = 1024
MAX_TIMESTAMP = (2**63 - 1) // 1000
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
PAGE_ROWS = 5000
PAGE_BYTES = 4 * 1024 * 1024
BATCH_GET_ROWS = 100
BATCH_GET_FULL = f"The response reached {PAGE_BYTES // (1024 * 1024)} MB: read this row in another request."
BATCH_WRITE_ROWS = 200
BATCH_WRITE_BYTES = 4 * 1024 * 1024
CU_BYTES = 4096

_PK_PY_TYPES = {PK_INTEGER: int, PK_STRING: str, PK_BINARY: bytes, PK_BOOLEAN: bool}
_VT_NAMES = {PK_INTEGER: "VT_INTEGER", PK_STRING: "VT_STRING", PK_BINARY: "VT_BLOB", PK_BOOLEAN: "VT_BOOLEAN"}
_EXPECT_NAMES = {pb.IGNORE: "IGNORE", pb.EXPECT_EXIST: "EXPECT_EXIST",
                 pb.EXPECT_NOT_EXIST: "EXPECT_NOT_EXIST"}


def _vt_name(value: object) -> str:
    if value is INF_MIN:
        return "VT_INF_MIN"
    if value is INF_MAX:
        return "VT_INF_MAX"
    if value is AUTO_INCREMENT:
        return "VT_AUTO_INCREMENT"
    return {bool: "VT_BOOLEAN", int: "VT_INTEGER", float: "VT_DOUBLE", str: "VT_STRING",
            bytes: "VT_BLOB"}.get(type(value), "VT_NULL")


def _consumed(read: int = 0, write: int = 0) -> pb.ConsumedCapacity:
    return pb.ConsumedCapacity(capacity_unit=pb.CapacityUnit(read=read, write=write))


def _cu(size: int) -> int:
    """Capacity units of `size` bytes: 4 KB each, rounded up, at least one."""
    return (size + CU_BYTES - 1) // CU_BYTES or 1


# -- primary keys --------------------------------------------------------------------------------


def check_pk(
    table: TableInfo, pk: Sequence[tuple[str, object]], *, write: bool = False, bound: bool = False
) -> list[object]:
    """The PK values in schema order; `write` allows the auto-increment placeholder, `bound`
    (range bounds) allows INF_MIN / INF_MAX."""
    schema = table.primary_key
    if len(pk) != len(schema):
        raise invalid_pk(f"Validate PK size fail. Input: {len(pk)}, Meta: {len(schema)}.")
    values: list[object] = []
    for (name, value), col in zip(pk, schema, strict=True):
        if name != col.name:
            raise invalid_pk(f"Validate PK name fail. Input: {name}, Meta: {col.name}.")
        kind = type(value)
        if kind is _PK_PY_TYPES[col.type] and (
            kind is int or kind is bool or len(value) * 4 <= MAX_PK_LENGTH  # type: ignore[arg-type]
        ):
            values.append(value)  # the common case: a str or bytes this short is within the limit
            continue
        if value is AUTO_INCREMENT:
            if not write:
                raise invalid("PKAutoIncr can't be used for read operations.")
            if not col.auto_increment:
                raise invalid_pk(
                    f"Validate PK type fail. Input: VT_AUTO_INCREMENT, Meta: {_VT_NAMES[col.type]}."
                )
        elif value is INF_MIN or value is INF_MAX:
            if not bound:
                raise invalid_pk(
                    f"Validate PK type fail. Input: {_vt_name(value)}, Meta: {_VT_NAMES[col.type]}."
                )
        elif type(value) is not _PK_PY_TYPES[col.type]:
            raise invalid_pk(
                f"Validate PK type fail. Input: {_vt_name(value)}, Meta: {_VT_NAMES[col.type]}."
            )
        elif col.type in (PK_STRING, PK_BINARY):
            length = len(value.encode() if isinstance(value, str) else value)  # type: ignore[arg-type]
            if length > MAX_PK_LENGTH:
                raise invalid(
                    f"The length of primary key column: '{name}' exceeds the MaxLength:"
                    f"{MAX_PK_LENGTH} with CurrentLength:{length}."
                )
        values.append(value)
    return values


def _read_pk(ctx: Context, table: TableInfo, data: bytes) -> tuple[bytes, StoredRow | None]:
    values = check_pk(table, decode_primary_key(data))
    key = keycodec.encode_key(values)
    if ctx.txn is not None:
        ctx.txn.check_row(table, values[0])
        return key, ctx.txn.row(ctx.storage.get, key)
    return key, ctx.storage.get(table.table_id, key)


# -- attribute columns ---------------------------------------------------------------------------


_valid_names: set[str] = set()  # column names that passed NAME_RE (names repeat across rows)
_SHORT_VALUE = MAX_VALUE_LENGTH // 4  # no str or bytes this long can exceed the limit


def _check_value(table: TableInfo, name: str, value: object) -> None:
    if name not in _valid_names:
        if not NAME_RE.match(name):
            raise invalid(f"Invalid column name: '{name}'.")
        if len(_valid_names) < 65536:
            _valid_names.add(name)
    if name in table.pk_name_set:
        raise invalid(f"Duplicated attribute column name with primary key column: '{name}'.")
    t = type(value)
    if t is int or t is bool:
        return
    if t is float:
        if math.isnan(value):  # type: ignore[arg-type]
            raise invalid("NaN can't be set to double value.")
        if math.isinf(value):  # type: ignore[arg-type]
            raise invalid("Infinity can't be set to double value.")
    elif t is str or t is bytes:
        # A str has at most 4 UTF-8 bytes per character: only long ones need encoding to measure.
        if len(value) * (4 if t is str else 1) > MAX_VALUE_LENGTH:  # type: ignore[arg-type]
            length = len(value.encode()) if t is str else len(value)  # type: ignore[union-attr,arg-type]
            if length > MAX_VALUE_LENGTH:
                raise invalid(
                    f"The length of attribute column: '{name}' exceeds the MaxLength:"
                    f"{MAX_VALUE_LENGTH} with CurrentLength:{length}."
                )
    else:
        raise invalid(f"{_vt_name(value)} is an invalid type for the attribute column.")


def _timestamp_bounds(table: TableInfo, now_ms: int) -> tuple[int, int]:
    """[lower, upper) a written timestamp must fall in: the table's time deviation, and not
    older than its TTL."""
    lower = now_ms - table.deviation * 1000
    if table.ttl != -1:
        lower = max(lower, now_ms - table.ttl * 1000)
    return lower, now_ms + table.deviation * 1000


def _check_timestamp(table: TableInfo, name: str, ts: int, now_ms: int) -> None:
    if not 0 <= ts < MAX_TIMESTAMP:
        raise invalid("Timestamp must be in range [0, INT64_MAX/1000).")
    lower, upper = _timestamp_bounds(table, now_ms)
    if not lower <= ts < upper:
        raise invalid(f"Invalid timestamp. Cell:{name}.")


def _version(name: str, value: object, ts: int) -> tuple[int, object, bytes, int]:
    cell, crc = encode_cell(name, value, ts)
    return ts, value, cell, crc


def _add_version(cells: Cells, name: str, version: tuple[int, object, bytes, int]) -> None:
    """Insert keeping newest-first order; a version with the same timestamp is replaced."""
    versions = [v for v in cells.get(name, ()) if v[0] != version[0]]
    versions.append(version)
    versions.sort(key=lambda v: v[0], reverse=True)
    cells[name] = versions


# -- row mutations -------------------------------------------------------------------------------


@dataclass
class WriteResult:
    row: bytes  # response `row` (empty unless asked for)
    read_cu: int
    write_cu: int


def _conditional(condition: pb.Condition) -> bool:
    """A condition on the row's existence or on its columns (each costs one read)."""
    return condition.row_existence != pb.IGNORE or condition.HasField("column_condition")


class _Mutation:
    """One row write: PK resolution (auto-increment), condition check, then the new stored row."""

    def __init__(
        self,
        ctx: Context,
        table: TableInfo,
        pk: Sequence[tuple[str, object]],
        condition: pb.Condition,
        encoded_pk: tuple[bytes, bytes] | None = None,
        hooks: list[MutationHook] | None = None,
    ) -> None:
        self.ctx = ctx
        self.table = table
        self.now_ms = ctx.now_ms
        values = check_pk(table, pk, write=True)
        self.auto = AUTO_INCREMENT in values
        if self.auto:
            if condition.row_existence != pb.IGNORE:
                expect = _EXPECT_NAMES.get(condition.row_existence, str(condition.row_existence))
                raise invalid(f"Invalid expect:{expect} when modify row with pk auto increment.")
            if condition.HasField("column_condition"):
                raise invalid("Can't set condition when modify row with pk auto increment.")
            floor = int(ctx.now * 1_000_000)
            values = [
                ctx.storage.next_auto_increment(table.table_id, floor) if v is AUTO_INCREMENT else v
                for v in values
            ]
            encoded_pk = None
        if ctx.txn is not None:
            ctx.txn.check_row(table, values[0])
        else:
            ctx.server.transactions.check_write(ctx, table, values[0])
        self.pk_values = tuple(values)
        self.key = keycodec.encode_key(values)
        if encoded_pk is None:
            pk_bytes, crcs = encode_primary_key_cells(zip(table.pk_names, values, strict=True))
            encoded_pk = pk_bytes, bytes(crcs)
        self.pk, self.pkc = encoded_pk
        self.condition = condition
        self.conditional = _conditional(condition)
        self.hooks = ctx.server.hooks_for(table) if hooks is None else hooks
        self._old: StoredRow | None = None
        self._loaded = False

    @property
    def needs_old(self) -> bool:
        return self.conditional or bool(self.hooks)

    def old(self) -> StoredRow | None:
        if not self._loaded:
            if self.auto:
                self._old = None
            elif self.ctx.txn is not None:
                self._old = self.ctx.txn.row(self.ctx.storage.get, self.key)
            else:
                self._old = self.ctx.storage.get(self.table.table_id, self.key)
            self._loaded = True
        return self._old

    def check_condition(self) -> None:
        if not self.conditional:
            return
        c = self.condition
        old = self.old()
        exists = rowdata.alive(self.table, old, self.now_ms)
        if c.row_existence == pb.EXPECT_EXIST and not exists:
            raise condition_failed()
        if c.row_existence == pb.EXPECT_NOT_EXIST and exists:
            raise condition_failed()
        if c.HasField("column_condition"):
            cells = rowdata.live_cells(self.table, old.data[1], self.now_ms) if exists and old else {}
            if not compile_filter(c.column_condition).matches(rowdata.filter_columns(cells)):
                raise condition_failed()

    def write(
        self, cells: Cells | None, change: RowChange | None = None, lsize: int | None = None
    ) -> StoredRow | None:
        """Store the row with `cells` (None deletes it) and run the mutation hooks, which see
        `change` as `ctx.row_change`. `lsize`: the row's logical size, when the caller knows it."""
        new = None
        if cells is not None:
            new = rowdata.make_row(self.key, self.pk, self.pkc, self.pk_values, cells, lsize)
        self.store(new, change)
        return new

    def store(self, new: StoredRow | None, change: RowChange | None) -> None:
        """`write` with the new row (None: a delete) built."""
        txn = self.ctx.txn
        if txn is not None:  # held back until commit, which runs the hooks
            txn.rows[self.key] = new
            txn.writes.append((self.table, self.key, new, change))
            return
        # Hooks get the row as it was: load it before it is overwritten.
        old = self.old() if self.hooks else None
        if new is None:
            self.ctx.storage.delete(self.table.table_id, self.key)
        else:
            self.ctx.storage.put(self.table.table_id, new)
        if self.hooks:
            self.ctx.row_change = change
            for hook in self.hooks:
                hook(self.ctx, self.table, self.key, old, new)
            self.ctx.row_change = None

    def result(self, return_content: pb.ReturnContent, new: StoredRow | None, size: int) -> WriteResult:
        read_cu = 1 if self.conditional else 0
        write_cu = _cu(size)
        kind = return_content.return_type  # RT_NONE when unset
        if kind == pb.RT_PK:
            return WriteResult(HEADER + assemble_row(self.pk, self.pkc, ()), read_cu, write_cu)
        if kind == pb.RT_AFTER_MODIFY and new is not None:
            names = set(return_content.return_column_names)
            cells = rowdata.live_cells(self.table, new.data[1], self.now_ms)
            picked = [(vs[0][2], vs[0][3]) for n, vs in cells.items() if n in names]
            row = HEADER + assemble_row(self.pk, self.pkc, picked)
            return WriteResult(row, read_cu, write_cu)
        return WriteResult(b"", read_cu, write_cu)


def decode_put_row(ctx: Context, data: bytes) -> Row | fastrow.PutRow:
    """A PutRow row: a fast path's ready-to-store form, or a decoded Row when neither applies."""
    return _fast_put_row(data, ctx.now_ms) or decode_row(data)


def _fast_put_row(data: bytes, now_ms: int, checks: fastrow.Checksums | None = None) -> fastrow.PutRow | None:
    """A PUT row by the native path, else by `fastrow` (with `checks`: checksums left to it);
    None when neither takes it."""
    return nativerow.parse_put_row(data) or fastrow.parse_put_row(data, now_ms, checks)


def put_one(
    ctx: Context,
    table: TableInfo,
    row: Row | fastrow.PutRow,
    condition: pb.Condition,
    return_content: pb.ReturnContent,
    hooks: list[MutationHook] | None = None,
) -> WriteResult:
    """`hooks`: `ctx.server.hooks_for(table)` when the caller has them."""
    now_ms = ctx.now_ms
    if isinstance(row, Row):
        if row.delete_marker:
            raise invalid("Delete marker is not allowed in PutRow.")
        pk, encoded_pk, latest = row.primary_key, None, None
        given = []
        for cell in row.cells:
            if cell.op is not None:
                raise invalid(f"OpType cannot be given for column name:{cell.name} in PutRow.")
            _check_value(table, cell.name, cell.value)
            ts = now_ms if cell.timestamp is None else cell.timestamp
            given.append((cell.name, cell.value, ts, *encode_cell(cell.name, cell.value, ts)))
        size = sum([len(name) + value_size(value) for name, value, *_ in given])
        suspect = True
    else:  # the fast path metered the row (its key included) while parsing it
        pk_bytes, pk_crcs, pk, given, size, suspect, sent, latest = row
        encoded_pk = pk_bytes, pk_crcs
        suspect = suspect or (sent is not None and not _timestamps_fit(table, sent, now_ms))
    if len(given) > MAX_COLUMNS_PER_WRITE:
        raise invalid(
            f"The number of attribute columns exceeds the limit, limit count: "
            f"{MAX_COLUMNS_PER_WRITE}, column count: {len(given)}."
        )
    names = {cell[0] for cell in given}
    if suspect or not names <= _valid_names or not names.isdisjoint(table.pk_name_set):
        _check_cells(table, given, now_ms)
    unique = len(names) == len(given)
    if (
        encoded_pk is not None
        and unique
        and ctx.txn is None
        and not _conditional(condition)
        and return_content.return_type == pb.RT_NONE
    ):  # no condition to check, nothing to return
        if hooks is None:
            hooks = ctx.server.hooks_for(table)
        if not hooks:
            return _put_plain(ctx, table, pk, encoded_pk, given, size, latest)
    mutation = _Mutation(ctx, table, pk, condition, encoded_pk, hooks)
    mutation.check_condition()
    if encoded_pk is None:
        size += logical_size(mutation.pk)
    if unique and not mutation.hooks and ctx.txn is None:
        # Nothing needs the values again: the row is its cells, stored as they are. (`latest`
        # is the sent row's: never one with an auto-increment key, which `nativerow` refuses.)
        new: StoredRow | None = rowdata.make_lean_row(
            mutation.key, mutation.pk, mutation.pkc, given, size, latest
        )
        mutation.store(new, None)
        return mutation.result(return_content, new, size)
    cells: Cells = {}
    for name, value, ts, encoded, crc in given:
        if name in cells:
            _add_version(cells, name, (ts, value, encoded, crc))
            cells[name] = cells[name][: table.max_versions]
        else:
            cells[name] = [(ts, value, encoded, crc)]
    change = None
    if mutation.hooks or ctx.txn is not None:
        change = RowChange(pb.PUT, [(n, v[1], None, v[0]) for n, vs in cells.items() for v in vs])
    # With every name given once, the row's newest versions are the cells given: what the write
    # meters is what the row's reads will.
    new = mutation.write(cells, change, size if unique else None)
    return mutation.result(return_content, new, size)


def _put_plain(
    ctx: Context, table: TableInfo, pk: Sequence[tuple[str, object]], encoded_pk: tuple[bytes, bytes],
    cells: list[tuple[str, object, int, bytes, int]], size: int, latest: bytes | None,
) -> WriteResult:
    """`put_one` of a row of the fast path (no auto-increment) with each column once, no
    condition, nothing to return, no hooks and no transaction: a `_Mutation` without the rest."""
    values = check_pk(table, pk, write=True)
    ctx.server.transactions.check_write(ctx, table, values[0])
    key = keycodec.encode_key(values)
    ctx.storage.put(table.table_id, rowdata.make_lean_row(key, *encoded_pk, cells, size, latest))
    return WriteResult(b"", 0, _cu(size))


def _timestamps_fit(table: TableInfo, sent: tuple[int, int], now_ms: int) -> bool:
    """Whether every timestamp from `sent[0]` to `sent[1]` passes `_check_timestamp`."""
    lower, upper = _timestamp_bounds(table, now_ms)
    return max(0, lower) <= sent[0] and sent[1] < min(upper, MAX_TIMESTAMP)


def _check_cells(
    table: TableInfo, cells: list[tuple[str, object, int, bytes, int]], now_ms: int
) -> None:
    """The checks of `_check_value` and `_check_timestamp` that can fail, cell by cell."""
    valid, pk_names = _valid_names, table.pk_name_set
    for name, value, ts, _, _ in cells:
        kind = type(value)
        # The full check only where it can fail: new names, doubles, long strings and blobs.
        if (
            name not in valid
            or name in pk_names
            or kind is float
            or (kind is not int and kind is not bool and len(value) > _SHORT_VALUE)  # type: ignore[arg-type]
        ):
            _check_value(table, name, value)
        if ts != now_ms:
            _check_timestamp(table, name, ts, now_ms)


def update_one(ctx: Context, table: TableInfo, row: Row, condition: pb.Condition,
               return_content: pb.ReturnContent, in_batch: bool = False) -> WriteResult:
    if not table.allow_update:
        raise invalid("UpdateRow is not allowed on a table whose allow_update is false.")
    if not row.cells:
        raise invalid(
            "Invalid update row request: missing cells in request."
            if in_batch
            else "Attribute column is missing."
        )
    if len(row.cells) > MAX_COLUMNS_PER_WRITE:
        raise invalid(
            f"The number of attribute columns exceeds the limit, limit count: "
            f"{MAX_COLUMNS_PER_WRITE}, column count: {len(row.cells)}."
        )
    now_ms = ctx.now_ms
    seen: set[str] = set()
    for cell in row.cells:
        if cell.name in seen:
            raise invalid(f"Duplicated attribute column name: '{cell.name}' while updating row.")
        seen.add(cell.name)
        _check_update_cell(table, cell, now_ms)
    mutation = _Mutation(ctx, table, row.primary_key, condition)
    mutation.check_condition()
    old = mutation.old()
    cells = rowdata.live_cells(table, old.data[1], now_ms) if old is not None else {}
    size = 0
    change = RowChange(pb.UPDATE, [])
    for cell in row.cells:
        size += len(cell.name) + value_size(cell.value)
        if cell.op is None:
            ts = now_ms if cell.timestamp is None else cell.timestamp
            version = _version(cell.name, cell.value, ts)
            _add_version(cells, cell.name, version)
            change.cells.append((cell.name, cell.value, None, ts))
        elif cell.op == OP_DELETE_ALL:
            cells.pop(cell.name, None)
            change.cells.append((cell.name, None, OP_DELETE_ALL, None))
        elif cell.op == OP_DELETE_ONE:
            change.cells.append((cell.name, None, OP_DELETE_ONE, cell.timestamp))
            remaining = [v for v in cells.get(cell.name, ()) if v[0] != cell.timestamp]
            if remaining:
                cells[cell.name] = remaining
            else:
                cells.pop(cell.name, None)
        else:
            current = cells.get(cell.name)
            base = current[0][1] if current else 0
            if type(base) is not int:
                raise invalid(f"Increment column '{cell.name}' is not an integer column.")
            total = base + cell.value  # type: ignore[operator]
            if not INT64_MIN <= total <= INT64_MAX:
                raise invalid(f"Integer overflow when incrementing column '{cell.name}'.")
            # Never below the version it adds to (a future explicit timestamp, a clock stepped
            # back): an older version would hide under it and the step would be lost.
            ts = max(now_ms, current[0][0]) if current else now_ms
            version = _version(cell.name, total, ts)
            _add_version(cells, cell.name, version)
            change.cells.append((cell.name, total, None, ts))
    for name, versions in cells.items():
        cells[name] = versions[: table.max_versions]
    if cells:
        new = mutation.write(cells, change)
    else:
        # A row left without cells no longer exists (nor is it created by a delete-only update).
        new = None
        if old is not None:
            mutation.write(None, change)
    return mutation.result(return_content, new, size + logical_size(mutation.pk))


def _check_update_cell(table: TableInfo, cell: Cell, now_ms: int) -> None:
    if cell.op is None:
        if cell.value is None:
            raise invalid(f"The value of column '{cell.name}' is missing in UpdateRow.")
        _check_value(table, cell.name, cell.value)
        if cell.timestamp is not None:
            _check_timestamp(table, cell.name, cell.timestamp, now_ms)
        return
    if not NAME_RE.match(cell.name):
        raise invalid(f"Invalid column name: '{cell.name}'.")
    if cell.name in table.pk_name_set:
        raise invalid(f"Duplicated attribute column name with primary key column: '{cell.name}'.")
    if cell.op == OP_INCREMENT:
        if type(cell.value) is not int:
            raise invalid(f"Increment value of column '{cell.name}' must be an integer.")
        if cell.timestamp is not None:
            raise invalid(f"Timestamp cannot be set when incrementing column '{cell.name}'.")
        return
    if cell.value is not None:
        raise invalid(f"Value cannot be set when deleting column '{cell.name}'.")
    if cell.op == OP_DELETE_ONE and cell.timestamp is None:
        raise invalid(f"Timestamp must be set when deleting one version of column '{cell.name}'.")


def delete_one(ctx: Context, table: TableInfo, row: Row, condition: pb.Condition,
               return_content: pb.ReturnContent) -> WriteResult:
    if any(v is AUTO_INCREMENT for _, v in row.primary_key):
        raise invalid("Invalid row to delete which with pk auto increment.")
    if row.cells:
        raise invalid("DeleteRow must not carry attribute columns.")
    mutation = _Mutation(ctx, table, row.primary_key, condition)
    mutation.check_condition()
    if not mutation.needs_old or mutation.old() is not None:
        mutation.write(None, RowChange(pb.DELETE, []))
    return mutation.result(return_content, None, logical_size(mutation.pk))


# -- single-row APIs -----------------------------------------------------------------------------


def put_row(ctx: Context, req: pb.PutRowRequest) -> pb.PutRowResponse:
    table = writable_table(ctx, req.table_name)
    transactions.bind(ctx, req)
    row = decode_put_row(ctx, req.row)
    with ctx.storage.transaction():
        result = put_one(ctx, table, row, req.condition, req.return_content)
    return pb.PutRowResponse(consumed=_consumed(result.read_cu, result.write_cu), row=result.row)


def update_row(ctx: Context, req: pb.UpdateRowRequest) -> pb.UpdateRowResponse:
    table = writable_table(ctx, req.table_name)
    transactions.bind(ctx, req)
    row = decode_row(req.row_change)
    with ctx.storage.transaction():
        result = update_one(ctx, table, row, req.condition, req.return_content)
    return pb.UpdateRowResponse(consumed=_consumed(result.read_cu, result.write_cu), row=result.row)


def delete_row(ctx: Context, req: pb.DeleteRowRequest) -> pb.DeleteRowResponse:
    table = writable_table(ctx, req.table_name)
    transactions.bind(ctx, req)
    row = decode_row(req.primary_key)
    with ctx.storage.transaction():
        result = delete_one(ctx, table, row, req.condition, req.return_content)
    return pb.DeleteRowResponse(consumed=_consumed(result.read_cu, result.write_cu), row=result.row)


def _read_spec(table: TableInfo, req: Any) -> ReadSpec:
    if req.HasField("max_versions"):
        if req.max_versions <= 0:
            raise invalid("The maximum versions cannot be less than or equal to 0.")
        if req.HasField("time_range") and req.time_range.HasField("specific_time"):
            raise invalid("Specific time and max versions cannot be set at the same time.")
    elif not req.HasField("time_range"):
        raise invalid("No version condition is specified while querying row.")
    time_range = None
    if req.HasField("time_range"):
        tr = req.time_range
        if tr.HasField("specific_time"):
            if tr.HasField("start_time") or tr.HasField("end_time"):
                raise invalid("Specific time and time range cannot be set at the same time.")
            time_range = (tr.specific_time, tr.specific_time + 1)
        else:
            if not (tr.HasField("start_time") and tr.HasField("end_time")):
                raise invalid("Both start time and end time of the time range are required.")
            if not 0 <= tr.start_time < tr.end_time:
                raise invalid("Invalid time range: the start time must be less than the end time.")
            time_range = (tr.start_time, tr.end_time)
    names = list(dict.fromkeys(req.columns_to_get))
    if len(names) > MAX_COLUMNS_TO_GET:
        raise invalid(
            f"The number of columns from the request exceeds the limit, limit count: "
            f"{MAX_COLUMNS_TO_GET}, column count: {len(names)}."
        )
    pk_names = columns = None
    if names:
        pks = table.pk_name_set
        # Rows carry their whole primary key unless columns_to_get picks key columns itself.
        pk_names = frozenset(n for n in names if n in pks) or None
        columns = frozenset(n for n in names if n not in pks)
    return ReadSpec(
        pk_names=pk_names,
        columns=columns,
        max_versions=req.max_versions if req.HasField("max_versions") else None,
        time_range=time_range,
        filter=compile_filter(req.filter) if req.HasField("filter") else None,
        start_column=req.start_column if req.HasField("start_column") else None,
        end_column=req.end_column if req.HasField("end_column") else None,
    )


def get_row(ctx: Context, req: pb.GetRowRequest) -> pb.GetRowResponse:
    table = readable_table(ctx, req.table_name)
    spec = _read_spec(table, req)
    transactions.bind(ctx, req)
    with ctx.storage.lock:
        _, stored = _read_pk(ctx, table, req.primary_key)
        data = rowdata.read(table, stored, spec, ctx.now_ms) if stored is not None else None
    body = HEADER + data if data is not None else b""
    read_cu = _cu(rowdata.read_size(stored, data)) if stored is not None and data is not None else 1
    return pb.GetRowResponse(consumed=_consumed(read=read_cu), row=body)


# -- GetRange ------------------------------------------------------------------------------------


def get_range(ctx: Context, req: pb.GetRangeRequest) -> bytes:
    """The serialized GetRangeResponse."""
    table = readable_table(ctx, req.table_name)
    spec = _read_spec(table, req)
    start = check_pk(table, decode_primary_key(req.inclusive_start_primary_key), bound=True)
    end = check_pk(table, decode_primary_key(req.exclusive_end_primary_key), bound=True)
    start_key, end_key = keycodec.encode_key(start), keycodec.encode_key(end)
    forward = req.direction == pb.FORWARD
    if forward and start_key >= end_key:
        raise invalid("Begin key must less than end key in FORWARD")
    if not forward and start_key <= end_key:
        raise invalid("Begin key must more than end key in BACKWARD")
    if req.HasField("limit") and req.limit <= 0:
        raise invalid("The limit must be greater than 0.")
    transactions.bind(ctx, req)
    if ctx.txn is not None:
        ctx.txn.check_row(table, start[0])
        ctx.txn.check_row(table, end[0])
    limit = min(req.limit, PAGE_ROWS) if req.HasField("limit") else PAGE_ROWS
    # Without a filter every scanned row is returned (bar expired ones), so read no more than
    # the page needs; with one, scan a full page and let the filter thin it out. One row more
    # tells whether the range goes on.
    budget = PAGE_ROWS if spec.filter is not None else limit
    now_ms = ctx.now_ms
    storage = ctx.storage
    out: list[bytes] = []
    size = 0
    metered = 0  # logical size, what read CU are counted by
    next_row: Any = None  # the row the next page starts with
    cutoff = rowdata.ttl_cutoff(table, now_ms)
    # Rows are read one at a time, so a page is cut while scanning: it reads the rows it returns
    # and at most one more, however big they are.
    with storage.lock, contextlib.ExitStack() as scanning:
        if ctx.txn is not None:
            rows: Iterator[Any] = iter(
                _scan_in_transaction(ctx, table, start_key, end_key, forward, budget + 1)
            )
        else:
            cursor = storage.scan_cursor(
                table.table_id, start_key, end_key, forward, budget + 1,
                latest_only=spec.simple, mints=cutoff is not None,
            )
            rows = scanning.enter_context(contextlib.closing(cursor))
        read, read_size = rowdata.read, rowdata.read_size
        simple = spec.simple and ctx.txn is None
        for i, row in enumerate(rows):
            if i == budget:
                next_row = row
                break
            if simple and (cutoff is None or row[3] is None or row[3] >= cutoff):
                # The stored encoding of the newest versions is the answer, and the size stored
                # with it what it meters (None in a row stored before sizes were).
                data = row[1]
                data_size = row[2] if row[2] is not None else logical_size(data)
            else:
                stored = row if not simple else storage.get(table.table_id, row[0])
                data = read(table, stored, spec, now_ms)
                if data is None:
                    continue
                data_size = read_size(stored, data)
            if out and size + len(data) > PAGE_BYTES:
                next_row = row
                break
            out.append(data)
            size += len(data)
            metered += data_size
            if len(out) == limit:
                next_row = next(rows, None)
                break
        next_pk = None
        if isinstance(next_row, StoredRow):  # (an uncommitted row of a transaction is not stored)
            next_pk = next_row.pk, next_row.pkc
        elif next_row is not None:  # a (key, latest, lsize[, mints]) of the fast path
            next_pk = storage.primary_key(table.table_id, next_row[0])
    next_start = HEADER + assemble_row(*next_pk, ()) if next_pk is not None else None
    return _get_range_response(_cu(metered), out, size, next_start)


def _get_range_response(read_cu: int, rows: list[bytes], size: int, next_start: bytes | None) -> bytes:
    """GetRangeResponse {consumed = 1, rows = 2 (HEADER + rows, or empty), next_start_primary_key
    = 3}, the rows (`size` bytes) copied once: a protobuf message would copy a page three times."""
    parts = [_pb_field(1, _consumed(read=read_cu).SerializeToString())]
    if rows:
        parts += (_varint(2 << 3 | 2), _varint(len(HEADER) + size), HEADER, *rows)
    else:
        parts.append(_pb_field(2, b""))
    if next_start is not None:
        parts.append(_pb_field(3, next_start))
    return b"".join(parts)


def _scan_in_transaction(
    ctx: Context, table: TableInfo, start: bytes, end: bytes, forward: bool, limit: int
) -> list[StoredRow]:
    """Like `Storage.scan`, with the transaction's own writes in place of the committed rows."""
    txn = ctx.txn
    assert txn is not None
    fetch = limit + len(txn.rows)
    committed = ctx.storage.scan(table.table_id, start, end, forward, fetch)
    merged: dict[bytes, StoredRow | None] = {row.key: row for row in committed}
    last = committed[-1].key if len(committed) == fetch else None  # scanned no further than this
    for key, row in txn.rows.items():
        inside = start <= key < end if forward else end < key <= start
        if inside and (last is None or (key <= last if forward else key >= last)):
            merged[key] = row
    keys = sorted(merged, reverse=not forward)
    return [row for key in keys if (row := merged[key]) is not None][:limit]


# -- batches -------------------------------------------------------------------------------------


def batch_get_row(ctx: Context, req: pb.BatchGetRowRequest) -> pb.BatchGetRowResponse:
    if not req.tables:
        raise invalid("No row specified in the request of BatchGetRow.")
    _check_table_names(t.table_name for t in req.tables)
    if sum(len(t.primary_key) for t in req.tables) > BATCH_GET_ROWS:
        raise invalid(f"Rows count exceeds the upper limit: {BATCH_GET_ROWS}.")
    plan = []
    for item in req.tables:
        table = readable_table(ctx, item.table_name)
        plan.append((item, table, _read_spec(table, item), [decode_primary_key(k) for k in item.primary_key]))
    resp = pb.BatchGetRowResponse()
    now_ms = ctx.now_ms
    size = 0  # of the rows answered so far: bounded like a GetRange page
    with ctx.storage.lock:
        for item, table, spec, keys in plan:
            out = resp.tables.add(table_name=item.table_name)
            encoded: list[bytes | OTSError] = []
            for pk in keys:
                try:
                    encoded.append(keycodec.encode_key(check_pk(table, pk)))
                except OTSError as e:
                    encoded.append(e)
            stored_rows = ctx.storage.get_many(table.table_id, [k for k in encoded if isinstance(k, bytes)])
            for key in encoded:
                result = out.rows.add()
                if isinstance(key, OTSError):
                    result.is_ok = False
                    result.error.code = key.code
                    result.error.message = key.message
                    continue
                stored = next(stored_rows)
                data = rowdata.read(table, stored, spec, now_ms) if stored is not None else None
                body = HEADER + data if data is not None else b""
                if size and size + len(body) > PAGE_BYTES:
                    # The response is full: this row fails on its own, retryably (the Go SDK
                    # sends such rows again), as the rows of an overloaded partition would.
                    result.is_ok = False
                    result.error.code = "OTSServerBusy"
                    result.error.message = BATCH_GET_FULL
                    continue
                size += len(body)
                result.is_ok = True
                read_cu = 1
                if stored is not None and data is not None:
                    read_cu = _cu(rowdata.read_size(stored, data))
                result.consumed.CopyFrom(_consumed(read=read_cu))
                result.row = body
    return resp


def _check_table_names(names: Any) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise invalid(f"Duplicated table name: {name}")
        seen.add(name)


def batch_write_row(ctx: Context, req: pb.BatchWriteRowRequest) -> bytes:
    """The serialized BatchWriteRowResponse."""
    if not req.tables:
        raise invalid("No row is specified in BatchWriteRow.")
    _check_table_names(t.table_name for t in req.tables)
    total = 0
    size = 0
    for item in req.tables:
        if not item.rows:
            raise invalid(f"No operation is specified for table: '{item.table_name}'.")
        total += len(item.rows)
        size += sum(len(r.row_change) for r in item.rows)
    if total > BATCH_WRITE_ROWS:
        raise invalid(f"Rows count exceeds the upper limit: {BATCH_WRITE_ROWS}.")
    if size > BATCH_WRITE_BYTES:
        raise invalid(
            "The total data size of BatchWriteRow request exceeds the limit, "
            f"limit size: {BATCH_WRITE_BYTES}, data size: {size}"
        )
    # Everything is decoded before anything is written: corrupt data fails the whole request.
    checks = fastrow.Checksums() if total >= fastrow.CHECK_TOGETHER else None
    plan = []
    for item in req.tables:
        table = writable_table(ctx, item.table_name)
        decoded: list[Row | fastrow.PutRow] = []
        for r in item.rows:
            data = r.row_change
            row = _fast_put_row(data, ctx.now_ms, checks) if r.type == pb.PUT else None
            if row is None:
                _verify(checks)  # rows before this one fail first, as they would one by one
                row = decode_row(data)
            decoded.append(row)
        plan.append((item, table, decoded))
    _verify(checks)
    transactions.bind(ctx, req)
    faults = ctx.server.options.faults
    # Rows write with one statement each, so only mutation hooks need per-row savepoints.
    tables = []
    with ctx.storage.transaction():
        for item, table, decoded in plan:
            hooks = ctx.server.hooks_for(table)
            results = []
            for request_row, row in zip(item.rows, decoded, strict=True):
                try:
                    fault = faults.row_error(ctx.api) if faults is not None else None
                    if fault is not None:
                        raise fault
                    if hooks:
                        with ctx.storage.savepoint():
                            written = _batch_row(ctx, table, request_row, row, hooks)
                    else:
                        written = _batch_row(ctx, table, request_row, row, hooks)
                except OTSError as e:
                    results.append(_failed_row(e))
                    continue
                results.append(_ok_row(written))
            tables.append(_pb_field(1, _pb_field(1, item.table_name.encode()) + b"".join(results)))
    return b"".join(tables)


def _verify(checks: fastrow.Checksums | None) -> None:
    """Raise the error of the first row whose cells `checks` found a wrong checksum in."""
    if checks is None:
        return
    suspects = checks.verify()
    for data in suspects:
        decode_row(data)  # raises for the first row with a wrong checksum
    if suspects:  # (never: `decode_row` checks every cell)
        raise PlainBufferError("Cell data broken, checksum mismatch.")


# The response of a batch is assembled from per-row pieces: building thousands of protobuf
# objects costs more than the rows themselves. Field helpers follow the protobuf wire format.
def _pb_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@functools.lru_cache(maxsize=256)
def _ok_head(read_cu: int, write_cu: int) -> bytes:
    ok = pb.RowInBatchWriteRowResponse(is_ok=True, consumed=_consumed(read_cu, write_cu))
    return ok.SerializeToString()


def _ok_row(written: WriteResult) -> bytes:
    """`rows` entry (field 2) of a TableInBatchWriteRowResponse for a row that succeeded."""
    if not written.row:
        return _ok_entry(written.read_cu, written.write_cu)
    return _pb_field(2, _ok_head(written.read_cu, written.write_cu) + _pb_field(4, written.row))


@functools.lru_cache(maxsize=256)
def _ok_entry(read_cu: int, write_cu: int) -> bytes:
    return _pb_field(2, _ok_head(read_cu, write_cu))


def _failed_row(e: OTSError) -> bytes:
    body = pb.RowInBatchWriteRowResponse(is_ok=False, error=pb.Error(code=e.code, message=e.message))
    return _pb_field(2, body.SerializeToString())


def _batch_row(
    ctx: Context, table: TableInfo, request_row: pb.RowInBatchWriteRowRequest, row: Any,
    hooks: list[MutationHook],
) -> WriteResult:
    condition, return_content = request_row.condition, request_row.return_content
    if request_row.type == pb.PUT:
        return put_one(ctx, table, row, condition, return_content, hooks)
    if request_row.type == pb.UPDATE:
        return update_one(ctx, table, row, condition, return_content, in_batch=True)
    return delete_one(ctx, table, row, condition, return_content)


HANDLERS: dict[str, tuple[type, Any]] = {
    "PutRow": (pb.PutRowRequest, put_row),
    "GetRow": (pb.GetRowRequest, get_row),
    "UpdateRow": (pb.UpdateRowRequest, update_row),
    "DeleteRow": (pb.DeleteRowRequest, delete_row),
    "BatchGetRow": (pb.BatchGetRowRequest, batch_get_row),
    "BatchWriteRow": (pb.BatchWriteRowRequest, batch_write_row),
    "GetRange": (pb.GetRangeRequest, get_range),
}
