"""SQLite storage: table metadata and rows, durable in a directory or in memory.

Rows live in one `WITHOUT ROWID` table keyed by (table_id, order-preserving key), so a GetRange is
an index range scan. Per row we keep the encoded PK cells and their checksums, `latest`: the
complete encoded row of the newest versions, so the common read (max_versions=1, whole row) is a
copy, with `lsize`, its logical size (what the read meters), so the read walks no cell, and
`cells`: every cell version with its encoded PlainBuffer cell (value + timestamp) and checksum.

A lean row, one whose every column has one version (what a PutRow writes), stores `cells` empty:
its versions are those of `latest`, decoded when asked for (`fastrow.stored_versions`), so a put
stores each cell once. Rows stored before lean rows existed all hold `cells` and read as before.
A server from before lean rows reads a lean row's whole-row reads right but fails on any read
that needs its versions (filters, columns_to_get, conditions, updates: marshal's "EOF read where
object expected"); the directory's format number (`PRAGMA user_version`, `FORMAT`) lets servers
from now on refuse a directory newer than they read instead.

One connection serialised by a lock: SQLite has one writer anyway, and under the GIL parallel
readers would gain little. Each request runs in one transaction, so a failed request leaves nothing.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import shutil
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

from tsmigrate.local.fastrow import stored_versions
from tsmigrate.local.model import TableInfo
from tsmigrate.wire.plainbuffer import decode_stored_row

# The sqlite3 module binds int, float, str and bytearray directly, but looks every bytes parameter
# up as something to adapt, failing through two attribute lookups (a formatted AttributeError):
# a tenth of what storing a row costs. An identity adapter is found at the first lookup, and
# `bytes.__bytes__` (Python 3.11+; a bytes object itself) is the cheapest one to call.
sqlite3.register_adapter(bytes, getattr(bytes, "__bytes__", bytes))

DB_FILE = "tablestore.sqlite3"
# Space set aside next to the database, given back when the disk refuses a write: the writes that
# follow a failure (an apply recording its step as failed and releasing its lock) then land.
RESERVE_FILE = "reserve.bin"
RESERVE_BYTES = 256 * 1024

# (timestamp ms, value, encoded cell bytes, cell checksum), newest first per column.
Version = tuple[int, object, bytes, int]
# Column name -> versions, in column-name order (the order rows are returned in).
Cells = dict[str, list[Version]]

_INSERT_ROW = (
    "INSERT OR REPLACE INTO rows (t, k, pk, pkc, latest, mints, cells, lsize)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_ROW_COLUMNS = "k, pk, pkc, latest, mints, cells, lsize"  # StoredRow's stored fields
_STORED_FIELDS = _ROW_COLUMNS.count(",") + 1
_KEYS_PER_QUERY = 500  # under SQLite's oldest default limit of 999 bound parameters
_GROUP_BYTES = 1 << 20  # stored bytes `get_many` reads at once
_SCHEMA = """
CREATE TABLE IF NOT EXISTS tables (
    instance TEXT NOT NULL, name TEXT NOT NULL, table_id INTEGER NOT NULL, meta TEXT NOT NULL,
    PRIMARY KEY (instance, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rows (
    t INTEGER NOT NULL, k BLOB NOT NULL, pk BLOB NOT NULL, pkc BLOB NOT NULL,
    latest BLOB NOT NULL, mints INTEGER, cells BLOB NOT NULL,
    PRIMARY KEY (t, k)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS search_indexes (
    instance TEXT NOT NULL, table_name TEXT NOT NULL, index_name TEXT NOT NULL,
    schema BLOB NOT NULL, ttl INTEGER NOT NULL, create_time INTEGER NOT NULL, meta TEXT NOT NULL,
    PRIMARY KEY (instance, table_name, index_name)) WITHOUT ROWID;
"""

# The data directory's format (`PRAGMA user_version`): 1 since lean rows. A directory of a
# higher number is refused (a newer server wrote rows this one may misread).
FORMAT = 1

# Columns `rows` gained after data directories were first written, added when one is opened. Rows
# written before (or by an older server since) hold NULL there: readers compute the value then.
_ADDED_ROW_COLUMNS = (("lsize", "INTEGER"),)


# SQLite's primary result codes for a write the disk refused (sqlite3.h): SQLITE_IOERR and
# SQLITE_FULL ("database or disk is full", also what `PRAGMA max_page_count` gives).
_SQLITE_IOERR = 10
_SQLITE_FULL = 13


def is_disk_failure(exc: BaseException) -> bool:
    """Did SQLite fail because the disk is full or failing (not a bug in a statement)?"""
    if not isinstance(exc, sqlite3.Error):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_SQLITE_IOERR, _SQLITE_FULL)
    return str(exc).startswith(("database or disk is full", "disk I/O error"))


def describe_disk_failure(data_dir: str | None, exc: BaseException) -> str:
    """One line naming the data directory, its free space and what SQLite said."""
    if data_dir is None:
        return f"cannot write the in-memory data: {exc}"
    try:
        free = f"{shutil.disk_usage(data_dir).free // 1024} KB free"
    except OSError:
        free = "free space unknown"
    return (f"cannot write the local data in {data_dir}: its disk is full or failing "
            f"({free}; SQLite: {exc})")


class StorageUnwritable(Exception):
    """The data directory could not be opened for writing: its disk is full or failing."""

    def __init__(self, data_dir: str | None, cause: BaseException) -> None:
        super().__init__(describe_disk_failure(data_dir, cause))
        self.data_dir = data_dir


class StorageFormatError(Exception):
    """The data directory was written by a newer server, in a format this one does not read."""

    def __init__(self, data_dir: str | None, found: int) -> None:
        super().__init__(
            f"the local data in {data_dir} has format {found}, newer than this tsmigrate reads "
            f"({FORMAT}): use the tsmigrate that wrote it, or a newer one")
        self.data_dir = data_dir


class StoredRow(NamedTuple):
    """One stored row; `pk`/`pkc` are the encoded PK cells and their checksums, `latest` the
    encoded row (no header) of the newest version of every column."""

    key: bytes
    pk: bytes
    pkc: bytes
    latest: bytes
    mints: int | None  # oldest timestamp among the newest versions (TTL fast path)
    blob: bytes  # marshal of (pk values, cells), or empty: a lean row (see the module docstring)
    # `plainbuffer.logical_size(latest)`, what a whole-row read meters, kept so that a scan need
    # not walk every cell; None for a row stored without it (see `_ADDED_ROW_COLUMNS`).
    lsize: int | None = None
    # (pk values, cells) of a lean row the server just built from them, so that the mutation
    # hooks do not decode them again (not stored: read rows have None).
    versions: tuple[tuple[object, ...], Cells] | None = None

    @property
    def data(self) -> tuple[tuple[object, ...], Cells]:
        if self.blob:
            return marshal.loads(self.blob)  # type: ignore[no-any-return]
        if self.versions is not None:
            return self.versions
        return stored_versions(self.latest) or decode_stored_row(self.latest)

    @staticmethod
    def pack(pk_values: tuple[object, ...], cells: Cells) -> bytes:
        return marshal.dumps((pk_values, cells))


def _stored_row(cursor: sqlite3.Cursor, row: tuple[object, ...]) -> StoredRow:
    return StoredRow(*row)  # type: ignore[arg-type]


class SearchIndexRecord(NamedTuple):
    """A search index as stored: the IndexSchema bytes, TTL (s), creation time (ms) and `meta`,
    JSON that searchapi owns (reindex links, traffic weights)."""

    table_name: str
    index_name: str
    schema: bytes
    ttl: int
    create_time: int
    meta: str


class Storage:
    def __init__(self, data_dir: str | None = None) -> None:
        if data_dir is None:
            path = ":memory:"
        else:
            os.makedirs(data_dir, exist_ok=True)
            path = os.path.join(data_dir, DB_FILE)
        self.data_dir = data_dir
        self.lock = threading.RLock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        try:
            if data_dir is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
                # NORMAL in WAL mode survives process crashes; only power loss can drop the last commits.
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA cache_size=-65536")
            self._check_format()
            self._db.executescript(_SCHEMA)
            have = {row[1] for row in self._db.execute("PRAGMA table_info(rows)")}
            for name, kind in _ADDED_ROW_COLUMNS:
                if name not in have:
                    self._db.execute(f"ALTER TABLE rows ADD COLUMN {name} {kind}")
        except StorageFormatError:
            self._db.close()
            raise
        except sqlite3.Error as exc:
            self._db.close()
            if is_disk_failure(exc):  # opening writes (the WAL, the schema): say which disk
                raise StorageUnwritable(data_dir, exc) from exc
            raise
        self._reserve: str | None = None if data_dir is None else os.path.join(data_dir, RESERVE_FILE)
        self._make_reserve()
        self._tables: dict[tuple[str, str], TableInfo] = {}
        for instance, meta in self._db.execute("SELECT instance, meta FROM tables"):
            info = TableInfo.from_json(meta)
            self._tables[(instance, info.name)] = info
        self._in_txn = False
        # Row inserts of the current transaction not yet sent to SQLite: a batch of puts goes in
        # one executemany. Every other statement flushes them first, so reads see them.
        self._pending: list[tuple[object, ...]] = []

    def _check_format(self) -> None:
        """Refuse a directory a newer server wrote; mark an older one as this format (it reads
        as is: lean rows only add to what a directory may hold)."""
        (found,) = self._db.execute("PRAGMA user_version").fetchone()
        if found > FORMAT:
            raise StorageFormatError(self.data_dir, found)
        if found < FORMAT:
            self._db.execute(f"PRAGMA user_version = {FORMAT}")

    def _make_reserve(self) -> None:
        """Set `RESERVE_BYTES` aside, unless it is already or the disk has no room for it."""
        if self._reserve is None or os.path.exists(self._reserve):
            return
        partial = self._reserve + ".tmp"
        try:
            with open(partial, "wb") as f:  # written, not sparse: the blocks are really taken
                f.write(bytes(RESERVE_BYTES))
            os.replace(partial, self._reserve)
        except OSError:  # no room: run without it (a full disk is then reported all the same)
            with contextlib.suppress(OSError):
                os.remove(partial)

    def release_reserve(self) -> bool:
        """Give the reserved space back (the disk just refused a write); False if there was none."""
        if self._reserve is None:
            return False
        try:
            os.remove(self._reserve)
        except OSError:
            return False
        return True

    def _flush(self) -> None:
        if self._pending:
            self._db.executemany(_INSERT_ROW, self._pending)
            self._pending.clear()

    def close(self) -> None:
        with self.lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Run the block atomically; nested uses join the outer transaction."""
        with self.lock:
            if self._in_txn:
                yield
                return
            self._db.execute("BEGIN")
            self._in_txn = True
            cached = dict(self._tables)
            try:
                yield
                self._flush()
                self._db.execute("COMMIT")  # may fail too (a full disk): undone like the rest
            except BaseException:
                self._pending.clear()
                # SQLite may have rolled back already (SQLITE_FULL, I/O errors): the first error
                # is the one to report.
                with contextlib.suppress(sqlite3.Error):
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                self._tables = cached
                raise
            finally:
                self._in_txn = False

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Inside a transaction: undo only this block's writes if it fails (one batch row)."""
        self._flush()
        self._db.execute("SAVEPOINT row")
        try:
            yield
            self._flush()
        except BaseException:
            self._pending.clear()
            with contextlib.suppress(sqlite3.Error):  # see transaction(): the first error counts
                self._db.execute("ROLLBACK TO row")
                self._db.execute("RELEASE row")
            raise
        else:
            self._db.execute("RELEASE row")

    # -- tables ---------------------------------------------------------------------------------

    def table(self, instance: str, name: str) -> TableInfo | None:
        return self._tables.get((instance, name))

    def tables(self, instance: str) -> list[TableInfo]:
        return [info for (inst, _), info in self._tables.items() if inst == instance]

    def new_table_id(self) -> int:
        return self._next_counter("table_id", 1)

    def save_table(self, instance: str, info: TableInfo) -> None:
        self._flush()
        self._db.execute(
            "INSERT OR REPLACE INTO tables (instance, name, table_id, meta) VALUES (?, ?, ?, ?)",
            (instance, info.name, info.table_id, info.to_json()),
        )
        self._tables[(instance, info.name)] = info

    def drop_table(self, instance: str, info: TableInfo) -> None:
        self._flush()
        self._db.execute("DELETE FROM tables WHERE instance = ? AND name = ?", (instance, info.name))
        self._db.execute("DELETE FROM rows WHERE t = ?", (info.table_id,))
        for index in info.indexes:  # index tables go with their table
            self.drop_rows(index.table_id)
            self.drop_rows(index.queue_id)
        self._db.execute("DELETE FROM counters WHERE name = ?", (f"autoinc:{info.table_id}",))
        del self._tables[(instance, info.name)]

    def drop_rows(self, table_id: int) -> None:
        """Delete every row stored under `table_id`."""
        self._flush()
        self._db.execute("DELETE FROM rows WHERE t = ?", (table_id,))

    # -- rows -----------------------------------------------------------------------------------

    def get(self, table_id: int, key: bytes) -> StoredRow | None:
        self._flush()
        row = self._db.execute(
            f"SELECT {_ROW_COLUMNS} FROM rows WHERE t = ? AND k = ?",
            (table_id, key),
        ).fetchone()
        return None if row is None else StoredRow(*row)

    def get_many(self, table_id: int, keys: list[bytes]) -> Iterator[StoredRow | None]:
        """The stored row of each of ``keys`` in order, None where none is: read by a few
        queries (BatchGetRow's 100 keys in two or three, against one each) in groups of at most
        ``_GROUP_BYTES`` stored bytes, so that a batch of big rows is never held whole."""
        self._flush()
        sizes: dict[bytes, int] = {}
        for start in range(0, len(keys), _KEYS_PER_QUERY):
            chunk = keys[start:start + _KEYS_PER_QUERY]
            sizes.update(self._db.execute(
                f"SELECT k, ifnull(length(cells), 0) + ifnull(length(latest), 0) FROM rows "
                f"WHERE t = ? AND k IN ({','.join('?' * len(chunk))})", (table_id, *chunk)))
        group: list[bytes] = []
        held = 0
        for n, key in enumerate(keys):
            group.append(key)
            held += sizes.get(key, 0)
            if held >= _GROUP_BYTES or n == len(keys) - 1:
                wanted = [k for k in group if k in sizes]
                rows = {row[0]: StoredRow(*row) for row in self._db.execute(
                    f"SELECT {_ROW_COLUMNS} FROM rows WHERE t = ? AND k IN ({','.join('?' * len(wanted))})",
                    (table_id, *wanted))} if wanted else {}
                yield from (rows.get(k) for k in group)
                group, held = [], 0

    def put(self, table_id: int, row: StoredRow) -> None:
        self._pending.append((table_id, *row[:_STORED_FIELDS]))
        if not self._in_txn:
            self._flush()

    def delete(self, table_id: int, key: bytes) -> None:
        self._flush()
        self._db.execute("DELETE FROM rows WHERE t = ? AND k = ?", (table_id, key))

    def scan(
        self, table_id: int, start: bytes, end: bytes, forward: bool, limit: int
    ) -> list[StoredRow]:
        """Rows in [start, end) forward, or in (end, start] backward, at most `limit`."""
        with contextlib.closing(self.scan_cursor(table_id, start, end, forward, limit)) as rows:
            return rows.fetchall()

    def key_sizes(self, table_id: int, start: bytes, limit: int) -> list[tuple[bytes, int]]:
        """(key, size of the encoded newest versions) of the rows from `start` on, in key
        order, at most `limit`: what split points are cut by, without reading the rows."""
        self._flush()
        return self._db.execute(
            "SELECT k, length(latest) FROM rows WHERE t = ? AND k >= ? ORDER BY k LIMIT ?",
            (table_id, start, limit),
        ).fetchall()

    # The aggregates below let split points skip runs of rows without bringing each into Python.

    def key_size_total(self, table_id: int, start: bytes) -> int:
        """The `key_sizes` sizes of the rows from `start` on, summed."""
        self._flush()
        (size,) = self._db.execute(
            "SELECT ifnull(sum(length(latest)), 0) FROM rows WHERE t = ? AND k >= ?",
            (table_id, start),
        ).fetchone()
        return size

    def key_size_run(self, table_id: int, start: bytes, rows: int) -> tuple[bytes, int] | None:
        """The last key of the `rows` rows from `start` on and their sizes summed; None when fewer
        rows are left. Two queries: finding the last key first keeps the sum a plain range scan."""
        self._flush()
        last = self._db.execute(
            "SELECT k FROM rows WHERE t = ? AND k >= ? ORDER BY k LIMIT 1 OFFSET ?",
            (table_id, start, rows - 1),
        ).fetchone()
        if last is None:
            return None
        (size,) = self._db.execute(
            "SELECT sum(length(latest)) FROM rows WHERE t = ? AND k >= ? AND k <= ?",
            (table_id, start, last[0]),
        ).fetchone()
        return last[0], size

    def scan_cursor(
        self, table_id: int, start: bytes, end: bytes, forward: bool, limit: int,
        latest_only: bool = False, mints: bool = True,
    ) -> sqlite3.Cursor:
        """`scan` one row at a time, for reads that stop at a size: only the rows taken are read.
        With `latest_only` only (key, latest, lsize) and, with `mints`, mints (every column read
        adds to a scan's time). Use it under the lock and close it there."""
        self._flush()
        if latest_only:
            columns = "k, latest, lsize, mints" if mints else "k, latest, lsize"
        else:
            columns = _ROW_COLUMNS
        where = "k >= ? AND k < ? ORDER BY k" if forward else "k <= ? AND k > ? ORDER BY k DESC"
        cursor = self._db.cursor()
        if not latest_only:
            cursor.row_factory = _stored_row
        return cursor.execute(
            f"SELECT {columns} FROM rows WHERE t = ? AND {where} LIMIT ?", (table_id, start, end, limit)
        )

    def primary_key(self, table_id: int, key: bytes) -> tuple[bytes, bytes] | None:
        """The encoded PK cells and their checksums of a stored row, without reading the row."""
        self._flush()
        return self._db.execute(
            "SELECT pk, pkc FROM rows WHERE t = ? AND k = ?", (table_id, key)
        ).fetchone()

    # -- search indexes (metadata only: searches read the rows) -----------------------------------

    def search_indexes(self, instance: str, table_name: str | None = None) -> list[SearchIndexRecord]:
        """The instance's search indexes (of one table when given), by table then index name."""
        self._flush()
        sql = "SELECT table_name, index_name, schema, ttl, create_time, meta FROM search_indexes"
        if table_name is None:
            rows = self._db.execute(f"{sql} WHERE instance = ? ORDER BY table_name, index_name",
                                    (instance,))
        else:
            rows = self._db.execute(f"{sql} WHERE instance = ? AND table_name = ? ORDER BY index_name",
                                    (instance, table_name))
        return [SearchIndexRecord(*r) for r in rows.fetchall()]

    def save_search_index(self, instance: str, record: SearchIndexRecord) -> None:
        self._flush()
        self._db.execute(
            "INSERT OR REPLACE INTO search_indexes"
            " (instance, table_name, index_name, schema, ttl, create_time, meta)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (instance, *record),
        )

    def drop_search_index(self, instance: str, table_name: str, index_name: str) -> None:
        self._flush()
        self._db.execute(
            "DELETE FROM search_indexes WHERE instance = ? AND table_name = ? AND index_name = ?",
            (instance, table_name, index_name),
        )

    def next_auto_increment(self, table_id: int, floor: int) -> int:
        """A value above every one handed out for the table, and at least `floor`."""
        name = f"autoinc:{table_id}"
        row = self._db.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
        value = max(floor, (row[0] + 1) if row else floor)
        self._db.execute("INSERT OR REPLACE INTO counters (name, value) VALUES (?, ?)", (name, value))
        return value

    def execute(self, sql: str, params: Sequence[object] = ()) -> sqlite3.Cursor:
        """One statement on the database, after pending row writes: for features that keep
        their own SQLite tables (streams), in the current transaction when there is one."""
        self._flush()
        return self._db.execute(sql, params)

    def _next_counter(self, name: str, start: int) -> int:
        row = self._db.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
        value = row[0] + 1 if row else start
        self._db.execute("INSERT OR REPLACE INTO counters (name, value) VALUES (?, ?)", (name, value))
        return value
