"""Streams: the change log of stream-enabled tables, and ListStream, DescribeStream,
GetShardIterator, GetStreamRecord (the SDK's `table_store.proto` messages).

The stream specification itself lives on the table (`tables.py`: CreateTable / UpdateTable
validate it, DescribeTable / UpdateTable return `stream_details`).

Shards: a stream starts with one shard covering every key, or, when the server's
`ServerOptions.stream_shards` (`local serve --stream-shards N`) is N > 1 as the stream gets its
id, with N root shards (no parents) splitting the key hashes evenly, as the service gives a
partitioned table one shard per partition (`open_shards`). `split_shard` and `merge_shards` (test
knobs standing in for the service's partition splits and merges) close shards and open children
(`StreamShard.parent_id`, and `parent_sibling_id` for a merge); a record goes to the open shard
whose hash range holds its primary key (`_route`, from the open ranges cached per stream and
dropped whenever its shards change). A closed shard is read to its end, then GetStreamRecord
returns no next iterator; readers must finish parents before their children.

Origin columns (`StreamSpecification.columns_to_get`, newer than the Python SDK's proto, see
`table_protocol.py`): each record of a row that existed before the write carries
`origin_record`, a PlainBuffer row with the primary key and the newest version of each of those
columns as they were before the write.

Every mutation of a stream-enabled table appends one record, in the service's format
`GetStreamRecordResponse.StreamRecord{action_type, record}`, `record` being one PlainBuffer row
with header, as the Java SDK's `PlainBufferConversion.toStreamRecord` reads it:

- PUT_ROW: the primary key and every written cell, with value and timestamp;
- UPDATE_ROW: the primary key and the update's cells: a put with value and timestamp (an
  increment is logged as the value it produced), "delete one version" as op 3 with the version's
  timestamp, "delete all versions" as op 1 alone;
- DELETE_ROW: the primary key and the delete-row marker.

No sequence-info extension (TAG_EXTENSION) is written: Java readers treat it as optional and the
Python SDK's PlainBuffer reader cannot skip it.

Records are written by a mutation hook scoped to stream-enabled tables, in the write's own
transaction (a failed batch row leaves no record), into SQLite tables next to the rows, so they
are durable with the data directory. Records older than the stream's expiration (hours, on the
data clock that `server.clock_offset` moves) are trimmed. A shard iterator is
`base64url(JSON) "." base64url(HMAC-SHA256)` under a key kept in the database; one that points at
trimmed records, at a stream that no longer exists, or that was altered gets
`404 OTSTrimmedDataAccess` (as the service and the Java stream client's mock answer). Disabling a
stream or deleting its table drops its records; enabling it again gives a new stream id.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import hmac
import itertools
import json
import os
import struct
import weakref
from typing import TYPE_CHECKING, Any

from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local.context import MAX_STREAM_SHARDS
from tsmigrate.local.errors import OTSError, invalid, table_not_exist
from tsmigrate.local.model import TableInfo
from tsmigrate.local.storage import Storage, StoredRow
from tsmigrate.wire import table_protocol
from tsmigrate.wire.plainbuffer import HEADER, assemble_row, crc8_bytes, encode_cell

if TYPE_CHECKING:
    from tsmigrate.local.context import Context, Server

MAX_RECORDS = 1000  # per GetStreamRecord
MAX_RECORD_BYTES = 4 * 1024 * 1024  # per GetStreamRecord (at least one record is returned)
TRIM_EVERY = 1024  # writes trim expired records once per this many records

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS stream_records (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " stream_id TEXT NOT NULL, ts INTEGER NOT NULL, action INTEGER NOT NULL, record BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS stream_records_seq ON stream_records (stream_id, seq)",
    "CREATE INDEX IF NOT EXISTS stream_records_ts ON stream_records (stream_id, ts)",
    # The highest sequence number trimmed per stream: iterators at or below it are stale.
    "CREATE TABLE IF NOT EXISTS stream_trims (stream_id TEXT PRIMARY KEY, seq INTEGER NOT NULL)"
    " WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS stream_keys (name TEXT PRIMARY KEY, key BLOB NOT NULL) WITHOUT ROWID",
    # Shards of a stream that started with several (`open_shards`), or once it was split or
    # merged; before that: one implicit root shard.
    # [lo, hi) is the range of key hashes the shard takes while open; closed_seq its last record.
    "CREATE TABLE IF NOT EXISTS stream_shards (stream_id TEXT NOT NULL, shard_id TEXT NOT NULL,"
    " parent_id TEXT, parent_sibling_id TEXT, lo INTEGER NOT NULL, hi INTEGER NOT NULL,"
    " closed_seq INTEGER, PRIMARY KEY (stream_id, shard_id)) WITHOUT ROWID",
)
# Columns added to stream_records after its first version (data directories made before keep
# working: their records belong to the root shard).
_ADDED_COLUMNS = (("shard", "TEXT"), ("origin", "BLOB"))
HASH_SPACE = 2**32
_ACTIONS = {pb.PUT: pb.PUT_ROW, pb.UPDATE: pb.UPDATE_ROW, pb.DELETE: pb.DELETE_ROW}
_pack_len = struct.Struct("<i").pack
_pack_ts = struct.Struct("<q").pack

# The open shards of each stream as `_route` reads them, per storage: their lower hash bounds in
# ascending order, and their ids. Filled by `_route` (in write transactions, which never change
# shards) and dropped by every change of a stream's shards (`_forget`: open, split, merge, drop),
# so that the next write reads them again, committed or rolled back.
_routes: weakref.WeakKeyDictionary[Storage, dict[str, tuple[list[int], list[str]]]] = (
    weakref.WeakKeyDictionary()
)


def _trimmed() -> OTSError:
    return OTSError(
        404, "OTSTrimmedDataAccess", "Requested stream data is already trimmed or does not exist."
    )


def _stream_not_exist() -> OTSError:
    return OTSError(404, "OTSObjectNotExist", "Requested stream does not exist.")


def install(server: Server) -> None:
    """Create the stream tables and register the change-log hook (stream-enabled tables only)."""
    storage = server.storage
    with storage.transaction():
        for statement in _SCHEMA:
            storage.execute(statement)
        have = {row[1] for row in storage.execute("PRAGMA table_info(stream_records)").fetchall()}
        for name, kind in _ADDED_COLUMNS:
            if name not in have:
                storage.execute(f"ALTER TABLE stream_records ADD COLUMN {name} {kind}")
        for (stream_id,) in storage.execute(
            "SELECT DISTINCT stream_id FROM stream_records WHERE shard IS NULL"
        ).fetchall():
            storage.execute("UPDATE stream_records SET shard = ? WHERE stream_id = ? AND shard IS NULL",
                            (_shard_id(stream_id), stream_id))
        storage.execute(
            "CREATE INDEX IF NOT EXISTS stream_records_shard ON stream_records (stream_id, shard, seq)"
        )
        if storage.execute("SELECT 1 FROM stream_keys WHERE name = 'iterator'").fetchone() is None:
            storage.execute(
                "INSERT INTO stream_keys (name, key) VALUES ('iterator', ?)", (os.urandom(32),)
            )
    server.add_table_hook(lambda table: table.stream_enabled, _log_mutation)


def drop_records(storage: Storage, stream_id: str | None) -> None:
    """Forget a stream's records (stream disabled or table deleted)."""
    if stream_id is not None:
        _forget(storage, stream_id)
        storage.execute("DELETE FROM stream_records WHERE stream_id = ?", (stream_id,))
        storage.execute("DELETE FROM stream_trims WHERE stream_id = ?", (stream_id,))
        storage.execute("DELETE FROM stream_shards WHERE stream_id = ?", (stream_id,))


def open_shards(storage: Storage, stream_id: str, n: int) -> list[str]:
    """Start a new stream (in the transaction that saves its table) with `n` root shards, no
    parents, taking [i * HASH_SPACE // n, (i + 1) * HASH_SPACE // n) each; their ids in that
    order. One shard stays the implicit one (no rows, as streams always had)."""
    if not 1 <= n <= MAX_STREAM_SHARDS:
        raise ValueError(f"stream shards must be in range [1, {MAX_STREAM_SHARDS}]: {n}")
    _forget(storage, stream_id)
    if n == 1:
        return [_shard_id(stream_id)]
    ids = [_root_id(stream_id, index) for index in range(n)]
    for index, shard_id in enumerate(ids):
        storage.execute(
            "INSERT INTO stream_shards (stream_id, shard_id, parent_id, parent_sibling_id, lo, hi,"
            " closed_seq) VALUES (?, ?, NULL, NULL, ?, ?, NULL)",
            (stream_id, shard_id, index * HASH_SPACE // n, (index + 1) * HASH_SPACE // n),
        )
    return ids


# -- the change log ------------------------------------------------------------------------------


def _log_mutation(
    ctx: Context, table: TableInfo, key: bytes, old: StoredRow | None, new: StoredRow | None
) -> None:
    change = ctx.row_change
    row = new if new is not None else old
    if change is None or row is None or table.stream_id is None:
        return
    cells = [_record_cell(name, value, op, ts) for name, value, op, ts in change.cells]
    record = HEADER + assemble_row(row.pk, row.pkc, cells, delete_marker=change.op == pb.DELETE)
    origin = None
    if table.stream_columns and old is not None:
        before = old.data[1]
        kept = [(before[name][0][2], before[name][0][3]) for name in table.stream_columns
                if name in before]
        origin = HEADER + assemble_row(old.pk, old.pkc, kept)
    cursor = ctx.storage.execute(
        "INSERT INTO stream_records (stream_id, ts, action, record, shard, origin)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (table.stream_id, ctx.now_ms, _ACTIONS[change.op], record,
         _route(ctx.storage, table.stream_id, row.pk), origin),
    )
    if (cursor.lastrowid or 0) % TRIM_EVERY == 0:
        _trim(ctx, table)


def _record_cell(name: str, value: object, op: int | None, ts: int | None) -> tuple[bytes, int]:
    """An encoded record cell: a put (value + timestamp) or a delete op (op [+ timestamp])."""
    if op is None:
        return encode_cell(name, value, ts)
    raw = name.encode()
    parts = [b"\x03\x04", _pack_len(len(raw)), raw, bytes((0x06, op))]
    crc = crc8_bytes(0, raw)
    if ts is not None:
        packed = _pack_ts(ts)
        parts += (b"\x07", packed)
        crc = crc8_bytes(crc, packed)
    # The checksum covers the timestamp before the op byte, as the SDK writers compute it.
    crc = crc8_bytes(crc, bytes((op,)))
    parts.append(bytes((0x0A, crc)))
    return b"".join(parts), crc


def _trim(ctx: Context, table: TableInfo) -> int:
    """Drop the records past the stream's expiration; the highest sequence number ever trimmed."""
    storage, stream_id = ctx.storage, table.stream_id
    cutoff = ctx.now_ms - (table.stream_expiration or 0) * 3600 * 1000
    (last,) = storage.execute(
        "SELECT max(seq) FROM stream_records WHERE stream_id = ? AND ts < ?", (stream_id, cutoff)
    ).fetchone()
    if last is not None:
        # The log is trimmed as a prefix: nothing older than an expired record stays readable.
        storage.execute(
            "DELETE FROM stream_records WHERE stream_id = ? AND seq <= ?", (stream_id, last)
        )
        storage.execute(
            "INSERT INTO stream_trims (stream_id, seq) VALUES (?, ?)"
            " ON CONFLICT (stream_id) DO UPDATE SET seq = max(seq, excluded.seq)",
            (stream_id, last),
        )
    row = storage.execute("SELECT seq FROM stream_trims WHERE stream_id = ?", (stream_id,)).fetchone()
    return int(row[0]) if row else 0


# -- shards and iterators ------------------------------------------------------------------------


def _shard_id(stream_id: str) -> str:
    return hashlib.sha256(stream_id.encode()).hexdigest()[:16]


def _root_id(stream_id: str, index: int) -> str:
    """The id of root shard `index` of a stream that started with several."""
    return hashlib.sha256(f"{stream_id}/root/{index}".encode()).hexdigest()[:16]


def _key_hash(pk: bytes) -> int:
    return int.from_bytes(hashlib.sha256(pk).digest()[:4], "big")


def _shards(storage: Storage, stream_id: str) -> list[dict[str, Any]]:
    """Every shard of the stream, closed ones included, by shard id."""
    rows = storage.execute(
        "SELECT shard_id, parent_id, parent_sibling_id, lo, hi, closed_seq FROM stream_shards"
        " WHERE stream_id = ? ORDER BY shard_id", (stream_id,),
    ).fetchall()
    if not rows:
        return [{"shard_id": _shard_id(stream_id), "parent_id": None, "parent_sibling_id": None,
                 "lo": 0, "hi": HASH_SPACE, "closed_seq": None}]
    names = ("shard_id", "parent_id", "parent_sibling_id", "lo", "hi", "closed_seq")
    return [dict(zip(names, row, strict=True)) for row in rows]


def _route(storage: Storage, stream_id: str, pk: bytes) -> str:
    """The open shard a record of this primary key goes to."""
    streams = _routes.get(storage)
    if streams is None:
        streams = _routes.setdefault(storage, {})
    route = streams.get(stream_id)
    if route is None:
        route = streams[stream_id] = _open_ranges(storage, stream_id)
    bounds, ids = route
    if len(ids) == 1:
        return ids[0]
    return ids[bisect.bisect_right(bounds, _key_hash(pk)) - 1]


def _open_ranges(storage: Storage, stream_id: str) -> tuple[list[int], list[str]]:
    """The open shards' lower bounds in ascending order and their ids (they tile the hash space:
    children take their parents' ranges)."""
    rows = storage.execute(
        "SELECT lo, shard_id FROM stream_shards WHERE stream_id = ? AND closed_seq IS NULL"
        " ORDER BY lo", (stream_id,),
    ).fetchall()
    if not rows:  # never split, merged or started with several: the implicit root shard
        return [0], [_shard_id(stream_id)]
    return [int(lo) for lo, _ in rows], [str(shard_id) for _, shard_id in rows]


def _forget(storage: Storage, stream_id: str) -> None:
    """Drop the stream's cached open shards (its shards change)."""
    streams = _routes.get(storage)
    if streams is not None:
        streams.pop(stream_id, None)


def _close(storage: Storage, stream_id: str, shard: dict[str, Any]) -> None:
    _forget(storage, stream_id)
    (last,) = storage.execute(
        "SELECT coalesce(max(seq), 0) FROM stream_records WHERE stream_id = ?", (stream_id,)
    ).fetchone()
    storage.execute(
        "INSERT INTO stream_shards (stream_id, shard_id, parent_id, parent_sibling_id, lo, hi,"
        " closed_seq) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (stream_id, shard_id)"
        " DO UPDATE SET closed_seq = excluded.closed_seq",
        (stream_id, shard["shard_id"], shard["parent_id"], shard["parent_sibling_id"],
         shard["lo"], shard["hi"], last),
    )


def _open(storage: Storage, stream_id: str, parent: str, sibling: str | None, lo: int, hi: int,
          tag: str) -> str:
    _forget(storage, stream_id)
    shard_id = hashlib.sha256(f"{stream_id}/{parent}/{sibling}/{tag}".encode()).hexdigest()[:16]
    storage.execute(
        "INSERT INTO stream_shards (stream_id, shard_id, parent_id, parent_sibling_id, lo, hi,"
        " closed_seq) VALUES (?, ?, ?, ?, ?, ?, NULL)",
        (stream_id, shard_id, parent, sibling, lo, hi),
    )
    return shard_id


def _stream_of(server: Server, instance: str, table_name: str) -> str:
    table = server.storage.table(instance, table_name)
    if table is None or not table.stream_enabled or table.stream_id is None:
        raise ValueError(f"table {table_name!r} has no enabled stream")
    return table.stream_id


def split_shard(server: Server, instance: str, table_name: str,
                shard_id: str | None = None) -> tuple[str, str]:
    """Test knob: close an open shard (the first one unless named) and open two children that
    take half of its key range each. Returns the children's ids."""
    storage = server.storage
    with storage.transaction():
        stream_id = _stream_of(server, instance, table_name)
        shard = next((s for s in _shards(storage, stream_id) if s["closed_seq"] is None
                      and shard_id in (None, s["shard_id"])), None)
        if shard is None:
            raise ValueError(f"the stream of {table_name!r} has no open shard {shard_id!r}")
        if shard["hi"] - shard["lo"] < 2:
            raise ValueError(f"shard {shard['shard_id']!r} takes one key hash: nothing to split")
        _close(storage, stream_id, shard)
        middle = (shard["lo"] + shard["hi"]) // 2
        return (
            _open(storage, stream_id, shard["shard_id"], None, shard["lo"], middle, "left"),
            _open(storage, stream_id, shard["shard_id"], None, middle, shard["hi"], "right"),
        )


def merge_shards(server: Server, instance: str, table_name: str) -> str:
    """Test knob: close the first two adjacent open shards and open one child over both ranges
    (parent and parent sibling). Returns the child's id."""
    storage = server.storage
    with storage.transaction():
        stream_id = _stream_of(server, instance, table_name)
        ranges = sorted((s for s in _shards(storage, stream_id) if s["closed_seq"] is None),
                        key=lambda s: s["lo"])
        # The open shards tile the hash space, so the first two by range are adjacent.
        pair = next(((a, b) for a, b in itertools.pairwise(ranges) if a["hi"] == b["lo"]), None)
        if pair is None:
            raise ValueError(f"the stream of {table_name!r} has one open shard: nothing to merge")
        left, right = pair
        _close(storage, stream_id, left)
        _close(storage, stream_id, right)
        return _open(storage, stream_id, left["shard_id"], right["shard_id"], left["lo"],
                     right["hi"], "merge")


def _stream_table(ctx: Context, stream_id: str) -> TableInfo | None:
    for table in ctx.storage.tables(ctx.instance):
        if table.stream_enabled and table.stream_id == stream_id:
            return table
    return None


def _key(storage: Storage) -> bytes:
    (key,) = storage.execute("SELECT key FROM stream_keys WHERE name = 'iterator'").fetchone()
    return bytes(key)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _make_iterator(storage: Storage, stream_id: str, shard_id: str, position: int) -> str:
    payload = json.dumps({"stream": stream_id, "shard": shard_id, "seq": position})
    mac = hmac.new(_key(storage), payload.encode(), hashlib.sha256).digest()
    return f"{_b64(payload.encode())}.{_b64(mac)}"


def _read_iterator(storage: Storage, iterator: str) -> tuple[str, str, int]:
    """(stream id, shard id, next sequence number) of a genuine iterator; anything else is an
    error."""
    try:
        head, _, tail = iterator.partition(".")
        payload = _unb64(head)
        mac = hmac.new(_key(storage), payload, hashlib.sha256).digest()
        if not hmac.compare_digest(mac, _unb64(tail)):
            raise _trimmed()
        data = json.loads(payload)
        return str(data["stream"]), str(data["shard"]), int(data["seq"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise _trimmed() from None


# -- APIs ----------------------------------------------------------------------------------------


def list_stream(ctx: Context, req: pb.ListStreamRequest) -> pb.ListStreamResponse:
    if req.HasField("table_name"):
        table = ctx.storage.table(ctx.instance, req.table_name)
        if table is None:
            raise table_not_exist()
        tables = [table]
    else:
        tables = sorted(ctx.storage.tables(ctx.instance), key=lambda t: t.name)
    resp = pb.ListStreamResponse()
    for t in tables:
        if t.stream_enabled and t.stream_id is not None:
            resp.streams.add(
                stream_id=t.stream_id, table_name=t.name, creation_time=t.stream_last_enable_time or 0
            )
    return resp


def describe_stream(ctx: Context, req: pb.DescribeStreamRequest) -> pb.DescribeStreamResponse:
    if req.HasField("shard_limit") and req.shard_limit <= 0:
        raise invalid("The shard limit must be greater than 0.")
    table = _stream_table(ctx, req.stream_id)
    if table is None:
        raise _stream_not_exist()
    resp = pb.DescribeStreamResponse(
        stream_id=req.stream_id,
        expiration_time=table.stream_expiration or 0,
        table_name=table.name,
        creation_time=table.stream_last_enable_time or 0,
        stream_status=pb.STREAM_ACTIVE,
    )
    for shard in _shards(ctx.storage, req.stream_id):
        if req.HasField("inclusive_start_shard_id") and shard["shard_id"] < req.inclusive_start_shard_id:
            continue
        entry = resp.shards.add(shard_id=shard["shard_id"])
        if shard["parent_id"]:
            entry.parent_id = shard["parent_id"]
        if shard["parent_sibling_id"]:
            entry.parent_sibling_id = shard["parent_sibling_id"]
    return resp


def get_shard_iterator(ctx: Context, req: pb.GetShardIteratorRequest) -> pb.GetShardIteratorResponse:
    with ctx.storage.transaction():
        table = _stream_table(ctx, req.stream_id)
        if table is None:
            raise _stream_not_exist()
        if req.shard_id not in {s["shard_id"] for s in _shards(ctx.storage, req.stream_id)}:
            raise OTSError(404, "OTSObjectNotExist", "Requested shard does not exist.")
        # The oldest record still kept: the first after everything trimmed.
        position = _trim(ctx, table) + 1
        iterator = _make_iterator(ctx.storage, req.stream_id, req.shard_id, position)
    return pb.GetShardIteratorResponse(shard_iterator=iterator)


def get_stream_record(ctx: Context, req: pb.GetStreamRecordRequest) -> pb.GetStreamRecordResponse:
    if req.HasField("limit") and req.limit <= 0:
        raise invalid("The limit must be greater than 0.")
    limit = min(req.limit, MAX_RECORDS) if req.HasField("limit") else MAX_RECORDS
    storage = ctx.storage
    resp = pb.GetStreamRecordResponse()
    with storage.transaction():
        stream_id, shard_id, position = _read_iterator(storage, req.shard_iterator)
        table = _stream_table(ctx, stream_id)
        if table is None or position <= _trim(ctx, table):
            raise _trimmed()
        shard = next((s for s in _shards(storage, stream_id) if s["shard_id"] == shard_id), None)
        if shard is None:
            raise _trimmed()
        rows: list[Any] = storage.execute(
            "SELECT seq, action, record, origin FROM stream_records WHERE stream_id = ?"
            " AND shard = ? AND seq >= ? ORDER BY seq LIMIT ?",
            (stream_id, shard_id, position, limit + 1),
        ).fetchall()
        size = 0
        returned = 0
        for seq, action, record, origin in rows[:limit]:
            if resp.stream_records and size + len(record) > MAX_RECORD_BYTES:
                break
            entry = resp.stream_records.add(action_type=action, record=record)
            if origin is not None:
                extra = table_protocol.StreamRecordOrigin(origin_record=bytes(origin))
                entry.MergeFromString(extra.SerializeToString())
            size += len(record)
            position = seq + 1
            returned += 1
        # An open shard has a next iterator while the stream is enabled; a closed (split or
        # merged) shard has none once its last record was returned.
        if shard["closed_seq"] is None or returned < len(rows):
            resp.next_shard_iterator = _make_iterator(storage, stream_id, shard_id, position)
    return resp


HANDLERS: dict[str, tuple[type, Any]] = {
    "ListStream": (pb.ListStreamRequest, list_stream),
    "DescribeStream": (pb.DescribeStreamRequest, describe_stream),
    "GetShardIterator": (pb.GetShardIteratorRequest, get_shard_iterator),
    "GetStreamRecord": (pb.GetStreamRecordRequest, get_stream_record),
}
