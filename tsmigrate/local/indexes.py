"""Secondary indexes (spec §4): CreateIndex, DropIndex, index rows kept in step with the base table,
and the read-only table view of an index for GetRow / GetRange / BatchGetRow.

An index is a table of its own rows (`IndexInfo.table_id`). Its primary key is the index columns
followed by the base PK columns not among them, in base order; its attribute columns are the
included defined columns the base row has. A base row lacking any index column has no index row
(the service's sparse index). Rows are maintained by a mutation hook scoped to tables that have
indexes, so writes to other tables keep the fast path.

Local indexes change in the writing transaction, and so do global ones unless
`ServerOptions.global_index_lag_ms` > 0: then a global index's changes are queued with a due time
(server clock, so `clock_offset` moves it) and applied, in order, when the index is next read once
they are due. The queue lives in the rows table under `IndexInfo.queue_id`, so it commits and rolls
back with the base write, survives restarts and goes with DropIndex / DeleteTable.

Messages: "Can't write index table directly." is the service's (D-ERR). The service's texts for the
rest are not published; ours (all 400 OTSParameterInvalid unless noted) say what is wrong:
"The max versions of a table with index must be 1." and "The table with index and TTL must disable
update (allow_update=false)." (CreateTable, CreateIndex, and an UpdateTable that would break an
existing index), "The number of indexes of table [t] exceeds the limit: 5.", 409
"Index already exists: i.", 404 "Requested index does not exist." (DropIndex), and the per-column
rules of `table_rules.check_index`.
"""

from __future__ import annotations

import copy
import itertools
import marshal
import time
from typing import TYPE_CHECKING, Any

from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local import keycodec, rowdata
from tsmigrate.local.errors import OTSError, invalid
from tsmigrate.local.model import PK_BINARY, PK_INTEGER, PK_STRING, IndexInfo, PKColumn, TableInfo
from tsmigrate.local.storage import StoredRow
from tsmigrate.local.table_rules import (
    TABLE_QUOTA,
    check_index,
    check_index_base_options,
    check_table_name,
    get_table,
    names_in_use,
    quota_used,
)
from tsmigrate.wire.plainbuffer import encode_primary_key_cells

if TYPE_CHECKING:
    from tsmigrate.local.context import Context

MAX_KEY_LENGTH = 1024  # an index key value obeys the limit of a PK value
_SCAN_PAGE = 1000
_KEY_TYPES = {pb.DCT_INTEGER: PK_INTEGER, pb.DCT_STRING: PK_STRING, pb.DCT_BLOB: PK_BINARY}
_PY_TYPES = {PK_INTEGER: int, PK_STRING: str, PK_BINARY: bytes}
# Queue entry keys: increasing across the process and, being clock-based, across restarts.
_queue_seq = itertools.count(time.time_ns())

# An index change: (index row key, the row to store, or None to delete it).
Change = tuple[bytes, StoredRow | None]


# -- the index as a table ------------------------------------------------------------------------


def index_primary_key(table: TableInfo, index: IndexInfo) -> list[PKColumn]:
    """The index table's PK: index columns, then the base PK columns not among them."""
    base_types = {c.name: c.type for c in table.primary_key}
    defined = dict(table.defined_columns)
    columns = [
        PKColumn(name, base_types[name] if name in base_types else _KEY_TYPES[defined[name]])
        for name in index.primary_key
    ]
    columns += [PKColumn(c.name, c.type) for c in table.primary_key if c.name not in index.primary_key]
    return columns


def table_view(table: TableInfo, index: IndexInfo) -> TableInfo:
    """The index as the row APIs see a table: its PK and attribute columns, the base's TTL."""
    defined = dict(table.defined_columns)
    return TableInfo(
        name=index.name,
        table_id=index.table_id,
        primary_key=index_primary_key(table, index),
        defined_columns=[(name, defined[name]) for name in index.defined_columns if name in defined],
        ttl=table.ttl,
        max_versions=1,
        deviation=table.deviation,
        allow_update=False,
        creation_time=table.creation_time,
    )


def find_index(ctx: Context, name: str) -> tuple[TableInfo, IndexInfo] | None:
    for table in ctx.storage.tables(ctx.instance):
        for index in table.indexes:
            if index.name == name:
                return table, index
    return None


def readable_table(ctx: Context, name: str) -> TableInfo:
    """The table `name` for a read: a data table, or the view of a secondary index (with its due
    changes applied first)."""
    if ctx.storage.table(ctx.instance, name) is None:
        check_table_name(name)
        found = find_index(ctx, name)
        if found is not None:
            table, index = found
            if index.index_type == pb.IT_GLOBAL_INDEX:
                with ctx.storage.transaction():
                    _drain(ctx, index, ctx.now_ms)
            return table_view(table, index)
    return get_table(ctx, name)


def writable_table(ctx: Context, name: str) -> TableInfo:
    """The data table `name` for a write; index tables are read-only."""
    if ctx.storage.table(ctx.instance, name) is None and find_index(ctx, name) is not None:
        raise invalid("Can't write index table directly.")
    return get_table(ctx, name)


# -- index rows ----------------------------------------------------------------------------------


def index_row(
    table: TableInfo, index: IndexInfo, pk: list[PKColumn], row: StoredRow | None
) -> StoredRow | None:
    """The index row of base row `row`, or None when the row is not indexed: it lacks an index
    column, or holds a value an index key cannot (another type than the column's, over 1 KB).
    Computed from the stored cells, expired ones included, so that the row a later write removes
    is exactly the one this wrote."""
    if row is None:
        return None
    pk_values, cells = row.data
    base = dict(zip(table.pk_names, pk_values, strict=True))
    values: list[object] = []
    for column in pk:
        if column.name in base:
            values.append(base[column.name])
            continue
        versions = cells.get(column.name)
        if not versions:
            return None
        value = versions[0][1]
        if type(value) is not _PY_TYPES[column.type]:
            return None
        if column.type != PK_INTEGER:
            size = len(value.encode()) if isinstance(value, str) else len(value)  # type: ignore[arg-type]
            if size > MAX_KEY_LENGTH:
                return None
        values.append(value)
    attributes = {name: cells[name][:1] for name in index.defined_columns if name in cells}
    pk_bytes, crcs = encode_primary_key_cells(zip([c.name for c in pk], values, strict=True))
    key = keycodec.encode_key(values)
    return rowdata.make_row(key, pk_bytes, bytes(crcs), tuple(values), attributes)


def maintained(table: TableInfo) -> bool:
    """Scope of the mutation hook: tables with secondary indexes."""
    return bool(table.indexes)


def on_mutation(
    ctx: Context, table: TableInfo, key: bytes, old: StoredRow | None, new: StoredRow | None
) -> None:
    """Mutation hook: move every index of `table` from the index row of `old` to that of `new`."""
    lag = ctx.server.options.global_index_lag_ms
    for index in table.indexes:
        pk = index_primary_key(table, index)
        before = index_row(table, index, pk, old)
        after = index_row(table, index, pk, new)
        changes: list[Change] = []
        if before is not None and (after is None or after.key != before.key):
            changes.append((before.key, None))
        if after is not None and after != before:
            changes.append((after.key, after))
        if not changes:
            continue
        if index.index_type == pb.IT_GLOBAL_INDEX:
            if lag > 0:
                _enqueue(ctx, index, ctx.now_ms + lag, changes)
                continue
            # The lag was turned off: what is still queued goes first, in order.
            _drain(ctx, index, None)
        _apply(ctx, index, changes)


def _apply(ctx: Context, index: IndexInfo, changes: list[Change]) -> None:
    for key, row in changes:
        if row is None:
            ctx.storage.delete(index.table_id, key)
        else:
            ctx.storage.put(index.table_id, row)


def _enqueue(ctx: Context, index: IndexInfo, due_ms: int, changes: list[Change]) -> None:
    # A queue entry borrows the stored-row shape: `mints` holds the due time, `blob` the changes.
    blob = marshal.dumps([(key, None if row is None else tuple(row)) for key, row in changes])
    entry = StoredRow(keycodec.encode_key([next(_queue_seq)]), b"", b"", b"", due_ms, blob)
    ctx.storage.put(index.queue_id, entry)


def _drain(ctx: Context, index: IndexInfo, until_ms: int | None) -> None:
    """Apply queued changes in order: those due by `until_ms`, or all when it is None."""
    storage = ctx.storage
    while True:
        entries = storage.scan(index.queue_id, b"", b"\xff", True, _SCAN_PAGE)
        for entry in entries:
            if until_ms is not None and entry.mints is not None and entry.mints > until_ms:
                return
            changes = [(k, None if r is None else StoredRow(*r)) for k, r in marshal.loads(entry.blob)]
            _apply(ctx, index, changes)
            storage.delete(index.queue_id, entry.key)
        if len(entries) < _SCAN_PAGE:
            return


def _backfill(ctx: Context, table: TableInfo, index: IndexInfo) -> None:
    """Index every existing row of `table` (CreateIndex with include_base_data)."""
    pk = index_primary_key(table, index)
    start = b""
    while True:
        rows = ctx.storage.scan(table.table_id, start, b"\xff", True, _SCAN_PAGE)
        for row in rows:
            entry = index_row(table, index, pk, row)
            if entry is not None:
                ctx.storage.put(index.table_id, entry)
        if len(rows) < _SCAN_PAGE:
            return
        start = rows[-1].key + b"\x00"  # the smallest key after the last one read


# -- CreateIndex / DropIndex ---------------------------------------------------------------------


def create_index(ctx: Context, req: pb.CreateIndexRequest) -> pb.CreateIndexResponse:
    with ctx.storage.transaction():
        table = copy.deepcopy(get_table(ctx, req.main_table_name))
        index = check_index(table, req.index_meta)
        table.indexes.append(index)
        check_index_base_options(table)
        if index.name in names_in_use(ctx):
            raise OTSError(409, "OTSObjectAlreadyExist", f"Index already exists: {index.name}.")
        if quota_used(ctx) + 1 > TABLE_QUOTA:
            raise OTSError(403, "OTSQuotaExhausted", "Number of tables exceeded the quota.")
        index.table_id = ctx.storage.new_table_id()
        if req.include_base_data:
            _backfill(ctx, table, index)
        ctx.storage.save_table(ctx.instance, table)
    return pb.CreateIndexResponse()


def drop_index(ctx: Context, req: pb.DropIndexRequest) -> pb.DropIndexResponse:
    with ctx.storage.transaction():
        table = copy.deepcopy(get_table(ctx, req.main_table_name))
        index = next((i for i in table.indexes if i.name == req.index_name), None)
        if index is None:
            raise OTSError(404, "OTSObjectNotExist", "Requested index does not exist.")
        table.indexes.remove(index)
        ctx.storage.drop_rows(index.table_id)
        ctx.storage.drop_rows(index.queue_id)
        ctx.storage.save_table(ctx.instance, table)
    return pb.DropIndexResponse()


HANDLERS: dict[str, tuple[type, Any]] = {
    "CreateIndex": (pb.CreateIndexRequest, create_index),
    "DropIndex": (pb.DropIndexRequest, drop_index),
}
