"""Change capture: the source's stream records, applied to the target while services still write
the source, so the target converges during and after the backfill.

How a record is applied: cell by cell. Capture re-reads the source row's current state (every
version, with timestamps) and the target row, and brings into the target only what the records
changed, each cell with its source timestamp; what services wrote to the target directly stays
unless the source changed it later (see ``Change`` and ``Capture.sync``):

- the columns a record wrote or deleted (every column, for a PutRow or a DeleteRow, which
  replace or remove the whole row) get the source's versions, written one by one through
  UpdateRow (PUT name, value, timestamp): the table keeps the newest versions by timestamp, so a
  newer target version is never hidden;
- versions of those columns the source row no longer has are deleted (UpdateRow DELETE of that
  one version) only where they are not newer than the change: a cell written to the target
  after the source's change stands;
- the target row is deleted only when the source row is gone and nothing newer than its
  deletion remains in it;
- a row that came to its target key (new, or its key changed) gets every source cell; fields of
  the old key kept as target attributes follow the source row's newest cell.

A target that takes no UpdateRow (``allow_update=False``) gets the merged row whole instead
(PutRow of every version it keeps, or DeleteRow), guarded by the row as read: a write that landed
in between refuses it, and the key is read and merged again (``_write_whole``, ``_guard``). A row
that cannot be carried at all is set aside (``set_aside``, saved with the position) and capture
goes on; the cut-over commands refuse while any is.

Cells pass through as bytes: records, source rows and target rows are read as PlainBuffer
(``RawClient.stream_record_bytes``, BatchGetRow through ``RawClient``), a cell is compared by its
encoded bytes and written into the target's UpdateRow as it came (name, value, timestamp and
checksum are the same there); only keys and the values the new key is built from are decoded.
Where tsmigrate's compiled walks are built (``wire/_rowwalk.c``), a page of records, the rows
read, a target row's merge and changes and the UpdateRows are each one C call, without a Python
object per cell beyond the ones kept (``read_records``, ``raw_rows``, ``merge_columns``,
``row_changes``); each has a Python twin giving the same result.

A target row nobody wrote directly therefore ends as the exact transform of its source row, as
before. Re-reading keeps this idempotent and insensitive to order: records may be applied twice
(after a kill) or seen across shards.

- A row whose new key changed (a column the new key is built from was updated): the record's
  origin columns (the values before the write, see ``prepare``) give the old target key, whose
  cells not newer than that record are deleted (the row with them when nothing newer remains),
  after checking that the row there still belongs to this source key (another row may have moved
  in meanwhile).
- Backfill and capture never race: while a split's backfill runs, records of keys in that split
  are not applied but kept as that split's dirty keys; once the split's checkpoint says done,
  the dirty keys are re-synced (re-read and written), and later records of that split are
  applied directly. So a row deleted at the source is never brought back by a late backfill
  write: the backfill write comes first, the re-sync after it.
- The position kept in ``tsmigrate_state`` (per shard, an iterator) only moves past records
  that are resolved (applied, or re-synced after their split finished): a kill loses nothing,
  the next run reads those records again.
- Shards: a shard's children are read only once its parents (a split has one, a merge two)
  were read to their end, so the records of one key are seen in order. Readable shards are
  applied in parallel (``shards``: threads, processes or Dask), each by a worker that keeps
  nothing (``run_shard``) and reads its next page while it applies the current one; the
  capture takes in their outcomes (``absorb``). A page's keys are synced together, their
  BatchGetRow requests (and then the write requests that do not wait for one another) sent at
  once on the process's event loop (``RawClient.call_together``), not from a thread each.
- Every split a record touches is kept (``touched``, saved with the position): verification
  takes the source totals of a split no record touched from its backfill checkpoint, since the
  stream proves those rows have not changed since the copy read them.
- An iterator that points at trimmed records (the stream expired them, or the capture was
  stopped longer than the stream keeps records) stops the rewrite: the target may have missed
  changes, and the only safe way on is to start the rewrite again.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import copy as copy_module
import gc
import operator
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import attrs
import tablestore as ts
from google.protobuf.message import DecodeError
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.contract import rowbytes
from tsmigrate.contract.rowbytes import RawCell, cell_value, key_row
from tsmigrate.contract.transform import TargetRow, format_key
from tsmigrate.errors import TsmigrateError
from tsmigrate.instance.rawclient import RawClient, StreamPage, stream_page, stream_request
from tsmigrate.rewrite import copy, machine, shards
from tsmigrate.rewrite.shards import ShardRunner
from tsmigrate.wire import plainbuffer

PAGE_RECORDS = 500
BATCH_GET = 100  # BatchGetRow's limit per request
SYNC_KEYS = PAGE_RECORDS  # keys read, merged and written together (their reads sent in parallel)
IO_THREADS = 32  # a page's kinds of writes (deletes, bare rows, updates) for every shard applied
STEP_BUDGET_S = 1.0  # how long a round reads a shard while its pages come full
GUARD_ATTEMPTS = 8  # reads and merges of a row another writer keeps changing, before it is set aside

Key = tuple[tuple[str, Any], ...]
# A cell of a target row by (name, timestamp): its encoded bytes and checksum (``RawCell``'s),
# compared by those bytes and written to the target as they came
Encoded = tuple[bytes, int]


class CaptureLost(machine.RewriteError):
    """The stream no longer has records capture needs."""


class CaptureBehind(machine.RewriteError):
    """Capture did not reach the end of its stream in the time it was given: the table is
    written faster than capture applies, or capture was far behind."""


class Record(NamedTuple):
    """A stream record as capture reads it from its bytes (``read_records``): the key decoded,
    the names and timestamps of the cells it wrote or deleted (0: none), and the origin columns'
    newest values the new key needs (None: the row did not exist, or the stream carries none)."""

    action: str  # put / update / delete
    key: Key
    cells: tuple[tuple[str, int], ...]
    origin: dict[str, Any] | None


def read_records(encoded: Sequence[tuple[str, bytes, bytes | None]],
                 wanted: frozenset[str]) -> list[Record]:
    """Records from ``RawClient.stream_record_bytes``; of the origin columns, the values of
    ``wanted`` are decoded, nothing else is. One compiled walk of the page where it is built
    (``read_records_in_python`` otherwise, the same records)."""
    if rowbytes._rowwalk is None:
        return read_records_in_python(encoded, wanted)
    try:
        return rowbytes._rowwalk.records(encoded, wanted, Record)
    except ValueError as exc:
        raise plainbuffer.PlainBufferError(f"a row read back is truncated or malformed ({exc})") from None


def read_records_in_python(encoded: Iterable[tuple[str, bytes, bytes | None]],
                           wanted: frozenset[str]) -> list[Record]:
    """``read_records`` in Python."""
    records = []
    for action, row, origin in encoded:
        key, cells, _ = rowbytes.row_cells_in_python(row)
        values = None if origin is None else rowbytes.row_cells_in_python(origin, wanted)[2]
        records.append(Record(action, key, tuple([(c[0], c[1]) for c in cells]), values))
    return records


_STAMP = operator.itemgetter(1)


def record_time(record: Record, read_ms: int) -> int:
    """The time of a record's change, in ms, by which target cells count as newer or not.

    A record carries no time of its own here: the service's sequence info (a PlainBuffer
    extension) is not written by the local server and not kept by ``Record``. The newest
    timestamp among the record's cells is the change's time when the service stamped the cells
    (and the time a writer meant, when it gave them). A record without any (a DeleteRow, an
    UpdateRow that only deletes whole columns) takes the time it was read: never earlier than
    the change, so every source cell it removed is not newer than it and goes from the target
    too; the price is that a cell written to the target directly between the change and its
    reading (within the capture lag) counts as older and goes with it.
    """
    return max(filter(None, map(_STAMP, record.cells)), default=read_ms)


@attrs.define
class Change:
    """What the stream records of one source key changed, as applying them needs it (times are
    record times, ``record_time``): kept per key from the record to the sync, merged over every
    record of the key meanwhile."""

    time: int = 0  # the newest record's
    # The newest PutRow or DeleteRow: it replaced or removed every column
    row_time: int | None = None
    # Column -> the newest record that wrote or deleted cells of it (an UpdateRow)
    columns: dict[str, int] = attrs.field(factory=dict)
    # Target keys the row had before a record (origin columns) -> that record's time
    olds: dict[Key, int] = attrs.field(factory=dict)
    # A record of a row whose former target key is not known (a new row, or one that could not
    # be mapped before): its target row gets every source cell
    arrived: bool = False

    def add(self, record: Record, when: int, old: Key | None) -> None:
        if when > self.time:
            self.time = when
        if record.action in ("put", "delete"):
            if self.row_time is None or when > self.row_time:
                self.row_time = when
        else:
            columns = self.columns
            for name, _ in record.cells:
                column = columns.get(name)
                if column is None or when > column:
                    columns[name] = when
        if old is None:
            self.arrived = True
        else:
            was = self.olds.get(old)
            if was is None or when > was:
                self.olds[old] = when

    def merge(self, other: Change) -> None:
        """Take in what ``other`` (later records of the same key) changed."""
        self.time = max(self.time, other.time)
        if other.row_time is not None:
            self.row_time = other.row_time if self.row_time is None else max(self.row_time, other.row_time)
        for name, when in other.columns.items():
            self.columns[name] = max(self.columns.get(name, when), when)
        for old, when in other.olds.items():
            self.olds[old] = max(self.olds.get(old, when), when)
        self.arrived |= other.arrived

    def column_time(self, name: str) -> int | None:
        """The time of the newest change of ``name``; None: the records did not touch it."""
        column = self.columns.get(name)
        if self.row_time is None:
            return column
        return self.row_time if column is None else max(column, self.row_time)


def ordered_changes(changes: list[tuple[str, str, Any, int]], before: dict[tuple[str, int], Any],
                    max_versions: int) -> list[tuple[str, str, Any, int]]:
    """A row's cell changes in the order they are safe to apply, column by column.

    Puts that become the column's newest versions go first when the versions they push out (a
    table keeps its ``max_versions`` newest) are all deleted anyway: a reader of the table never
    sees the column missing between the old value's delete and the new value's put. Otherwise the
    deletes go first, since a version put below ``max_versions`` newer ones is dropped at once,
    even when one of those is deleted next."""
    columns: dict[str, list[tuple[str, str, Any, int]]] = {}
    for change in changes:
        columns.setdefault(change[1], []).append(change)
    ordered = []
    for name, cells in columns.items():
        current = [stamp for (column, stamp) in before if column == name]
        deleted = {c[3] for c in cells if c[0] == "delete"}
        newest = max(current, default=-1)
        first = [c for c in cells if c[0] == "put" and c[3] > newest]
        held = sorted(current + [c[3] for c in first], reverse=True)
        if not first or not set(held[max_versions:]) <= deleted:
            first = []
        ordered += first
        ordered += [c for c in cells if c[0] == "delete"]
        ordered += [c for c in cells if c[0] == "put" and c not in first]
    return ordered


def row_changes(before: dict[tuple[str, int], Encoded], cells: dict[tuple[str, int], Encoded],
                max_versions: int) -> list[tuple[str, str, Any, int]]:
    """What turns a target row's cells ``before`` into ``cells``: puts of the versions that are
    new or other bytes, deletes of the versions that went, in the order ``ordered_changes``
    gives. Compiled where built (``row_changes_in_python`` otherwise, the same changes)."""
    if rowbytes._rowwalk is not None:
        changes = rowbytes._rowwalk.row_changes(before, cells, max_versions)
        if changes is not None:
            return changes
    return row_changes_in_python(before, cells, max_versions)


def row_changes_in_python(before: dict[tuple[str, int], Encoded], cells: dict[tuple[str, int], Encoded],
                          max_versions: int) -> list[tuple[str, str, Any, int]]:
    """``row_changes`` in Python."""
    changes = [("put", name, encoded, stamp) for (name, stamp), encoded in cells.items()
               if before.get((name, stamp)) != encoded]
    changes += [("delete", name, None, stamp) for name, stamp in before if (name, stamp) not in cells]
    return ordered_changes(changes, before, max_versions) if changes else []


def merge_columns(cells: dict[tuple[str, int], Encoded], source: Sequence[RawCell],
                  columns: dict[str, int], row_time: int | None, arrived: bool,
                  added: Iterable[str]) -> bool:
    """``Capture._merge``'s columns but ``added``, into a target row's ``cells``: each column a
    change touched (``columns``: name -> time of its newest change; ``row_time``: of the newest
    whole-row change, which touched every column), or every column when the row ``arrived``,
    takes the source's versions, and loses the versions the source lacks that are not newer than
    the change. Whether any source version was put. Compiled where built
    (``merge_columns_in_python`` otherwise, the same cells in the same order)."""
    if rowbytes._rowwalk is not None:
        return rowbytes._rowwalk.merge_columns(cells, source, columns, row_time, arrived, added)
    return merge_columns_in_python(cells, source, columns, row_time, arrived, added)


def merge_columns_in_python(cells: dict[tuple[str, int], Encoded], source: Sequence[RawCell],
                            columns: dict[str, int], row_time: int | None, arrived: bool,
                            added: Iterable[str]) -> bool:
    """``merge_columns`` in Python."""
    versions: dict[str, list[tuple[int, Encoded]]] = {}
    for name, stamp, cell, crc in source:
        versions.setdefault(name, []).append((stamp, (cell, crc)))
    names = dict.fromkeys([*versions, *(name for name, _ in cells)])
    wrote = False
    for name in names:
        if name in added:
            continue
        column = columns.get(name)  # Change.column_time
        when = column if row_time is None else row_time if column is None else max(column, row_time)
        if when is None and not arrived:
            continue
        kept = {(name, stamp) for stamp, _ in versions.get(name, ())}
        for stamp, encoded in versions.get(name, ()):
            cells[(name, stamp)] = encoded
            wrote = True
        if when is not None:
            for version in [v for v in cells if v[0] == name and v[1] <= when and v not in kept]:
                del cells[version]
    return wrote


@attrs.define
class _TargetRow:
    """A target row as read, and as it is to become: cells by (name, timestamp), read order."""

    key: Key
    existed: bool
    before: dict[tuple[str, int], Encoded]
    exists: bool = False
    cells: dict[tuple[str, int], Encoded] = attrs.field(factory=dict)

    @classmethod
    def read(cls, key: Key, row: RawRow | None) -> _TargetRow:
        before = {} if row is None else {(c[0], c[1]): (c[2], c[3]) for c in row.cells}
        return cls(key, row is not None, before, row is not None, dict(before))

    @classmethod
    def of(cls, key: Key, buf: bytes | None) -> _TargetRow:
        """``read`` of a row as BatchGetRow returned it (None: absent), its cells taken from
        the bytes at once (``rowbytes.row_versions``)."""
        before = {} if buf is None else rowbytes.row_versions(buf)
        return cls(key, buf is not None, before, buf is not None, dict(before))

    def values_of(self, names: frozenset[str]) -> list[tuple[str, Any]]:
        """(name, value) of the cells of ``names``, decoded, newest version first."""
        return [(name, cell_value(cell)) for (name, _), (cell, _) in self.cells.items()
                if name in names]

    def drop(self, name: str | None, when: int, keep: Any = ()) -> int:
        """Remove the versions (of ``name``, or of every column) not newer than ``when``, but
        those in ``keep``; how many went."""
        gone = [v for v in self.cells if (name is None or v[0] == name) and v[1] <= when
                and v not in keep]
        for version in gone:
            del self.cells[version]
        return len(gone)


@attrs.define
class Pending:
    """Records of one page that wait for splits whose backfill still runs."""

    iterator: str  # where this page started: the shard's checkpoint while anything waits
    splits: set[int]


@attrs.define
class ShardState:
    shard_id: str
    iterator: str | None  # the next page; None once a closed shard was read to its end
    parents: list[str]
    done: bool = False
    pending: list[Pending] = attrs.field(factory=list)
    # Since this process read it: whether its last page was short (it was at its end then), the
    # newest record time read, records applied, and the last round's rate
    drained: bool = False
    last_record_ms: int = 0
    records: int = 0
    records_per_s: float = 0.0

    def checkpoint(self) -> dict[str, Any]:
        iterator = self.pending[0].iterator if self.pending else self.iterator
        return {"iterator": iterator, "parents": self.parents,
                "done": self.done and not self.pending}


@attrs.define
class Stats:
    applied: int = 0
    deferred: int = 0
    resynced: int = 0
    moved: int = 0
    last_record_ms: int = 0
    caught_up: bool = False
    guard_retries: int = 0  # whole-row writes read and merged again: the row changed meanwhile
    records_per_s: float = 0.0  # the last round's, every shard together
    workers: int = 1
    # Shard id -> {records, records_per_s, lag_s}: what status shows per shard
    shards: dict[str, dict[str, Any]] = attrs.field(factory=dict)


COUNTS = ("applied", "deferred", "resynced", "moved", "guard_retries")


@attrs.frozen
class ShardWork:
    """One task of a round: read ``shard_id`` from ``iterator`` for up to ``budget_s`` (at
    least one page), applying what the splits in ``finished`` (and any found finished) allow.
    Small and picklable: it goes to threads, processes or Dask workers alike."""

    shard_id: str
    iterator: str
    parents: tuple[str, ...]
    finished: frozenset[int]
    budget_s: float
    record_keys: bool = False  # return the source keys synced (the fence verifies them again)


@attrs.define
class ShardOutcome:
    """What a ``ShardWork`` did, for the capture to take in (``Capture.absorb``)."""

    shard_id: str
    iterator: str | None
    done: bool
    pending: list[Pending]
    dirty: dict[int, dict[Key, Change]]
    finished: set[int]
    touched: set[int] | None
    set_aside: dict[str, dict[str, Any]]
    cleared: set[Key]  # source keys synced: off the set-aside list, if they were on it
    stats: Stats
    records: int
    drained: bool  # the last page read was short: the shard was at its end then
    elapsed_s: float
    synced: set[Key] | None


def _settle_heap() -> None:
    """Every object alive now (the modules imported, the client, the rewrite's documents) out
    of the cyclic collector's way for good (``gc.freeze``), garbage collected first so none is
    frozen with them. Capture makes objects by the hundred thousand, and the full collection
    they trigger walked all of those again: 5 to 10 µs of CPU per record on bench/capture.py's
    loop, 0.1 to 0.3 once frozen. Objects freed later by their counts are freed as before; only
    what was alive when the first capture was made stays frozen, once per process."""
    global _heap_settled
    if _heap_settled:
        return
    _heap_settled = True
    gc.collect()
    gc.freeze()


_heap_settled = False  # once per process: a freeze is for good, and a collection costs a pass

# Pages applied now in this process's threads: the cyclic collector waits while any is
_pages_lock = threading.Lock()
_pages_applied = 0
_collector_was_on = False


@contextlib.contextmanager
def _uncollected() -> Iterator[None]:
    """A page applied without the cyclic collector, as ``commands.common.imports_uncollected``
    imports: a page's records, rows and changes (tens of thousands of containers, freed by
    their counts once the page is done) triggered young collections every 700 of them, and
    every tenth walked all the page's survivors again (2.1 to 2.6 µs of CPU per record on
    bench/capture.py's loop; 0.25 to 0.3 left). The collector is back on once no thread
    applies a page (unless it was off already); the next allocation then collects what the
    page left, cyclic garbage included, as before."""
    global _pages_applied, _collector_was_on
    with _pages_lock:
        if _pages_applied == 0:
            _collector_was_on = gc.isenabled()
            gc.disable()
        _pages_applied += 1
    try:
        yield
    finally:
        with _pages_lock:
            _pages_applied -= 1
            if _pages_applied == 0 and _collector_was_on:
                gc.enable()


def _key(pk: Iterable[tuple[str, Any]]) -> Key:
    return tuple([(name, value) for name, value in pk])


class Capture:
    """Follows the source's stream into the target. ``split_of(key)`` gives the split index of
    a source key; ``split_done(index)`` whether that split's backfill finished."""

    change_type: type[Change] = Change  # what a key's records are gathered into until its sync

    def __init__(
        self,
        client: Any,
        job: Any,
        transform: Any,
        position: dict[str, Any],
        *,
        split_of: Callable[[Key], int],
        split_done: Callable[[int], bool],
        writer: Any,
        touched: Iterable[int] | None = (),
    ):
        self.client = client
        self.raw = RawClient(client)
        self.job = job
        self.transform = transform
        self.stream_id: str = position["stream_id"]
        self.shards = {
            shard_id: ShardState(shard_id, s["iterator"], list(s["parents"]), bool(s["done"]))
            for shard_id, s in position["shards"].items()
        }
        self.split_of = split_of
        self.split_done = split_done
        self.writer = writer
        # split index -> source key -> what its records changed (applied once the split is done)
        self.dirty: dict[int, dict[Key, Change]] = {}
        self.finished_splits: set[int] = set()
        # Splits any record touched since capture started; None: not known (a rewrite prepared
        # before splits were tracked), so verification reads every split's source rows.
        self.touched: set[int] | None = None if touched is None else set(touched)
        # Rows capture could not carry: formatted source key -> {"reason", "at_ms"}
        self.set_aside: dict[str, dict[str, Any]] = dict(position.get("set_aside") or {})
        self.stats = Stats()
        self.runner: ShardRunner = shards.Inline()  # who applies the shards (``shards``)
        self.ref: shards.CaptureRef | None = None  # how a worker elsewhere builds this capture
        # Source keys synced since someone asked (``record``): the fence verifies them again
        self.synced: set[Key] | None = None
        self.cleared: set[Key] = set()  # source keys a worker synced (``ShardOutcome``)
        _settle_heap()

    # -- the position ----------------------------------------------------------------------------

    def position(self) -> dict[str, Any]:
        return {"stream_id": self.stream_id,
                "shards": {s.shard_id: s.checkpoint() for s in self.shards.values()},
                "set_aside": dict(self.set_aside)}

    def lag_s(self) -> float:
        """How far behind the stream capture is: the oldest shard's lag, a shard's being the
        time since its newest record read, unless its last page was short (at its end)."""
        if self.stats.caught_up or not self.stats.last_record_ms:
            return 0.0
        return max(self._shard_lags().values(), default=0.0)

    def _shard_lags(self) -> dict[str, float]:
        now = time.time()
        lags = {}
        for shard in self.shards.values():
            if shard.done or shard.drained:
                lags[shard.shard_id] = 0.0
            else:
                newest = shard.last_record_ms or self.stats.last_record_ms
                lags[shard.shard_id] = max(0.0, now - newest / 1000) if newest else 0.0
        return lags

    def behind(self, what: str, within_s: float) -> CaptureBehind:
        """The error of ``what`` waiting longer than ``within_s`` for this capture."""
        source = self.job.source.name
        return CaptureBehind(
            f"{what}: capture did not reach the end of {source}'s stream within {within_s:g}s: "
            f"{self.lag_s():.1f}s behind, applying {self.stats.records_per_s:,.0f} records/s over "
            f"{len(self.shards)} shard(s) with {self.stats.workers} worker(s). {source} is written "
            "faster than that: give capture more workers (`tsmigrate rewrite follow --workers N`, "
            "up to one per shard; the cut-over commands then use as many), or run it again when "
            "writes slow down"
        )

    def record(self) -> set[Key]:
        """From now on, keep the source keys synced (returned, filled as rounds go)."""
        self.synced = set()
        return self.synced

    # -- one round over the shards ---------------------------------------------------------------

    def step(self, budget_s: float | None = None) -> int:
        """One round: every readable shard (its parents read to their end) is read and applied
        for up to ``budget_s`` (at least a page), in parallel as ``runner`` allows; the dirty
        keys of splits that finished are synced first. Returns the number of records read."""
        budget_s = STEP_BUDGET_S if budget_s is None else budget_s
        self._discover()
        self._resolve_finished_splits()
        finished = frozenset(self.finished_splits)
        works = [ShardWork(s.shard_id, s.iterator, tuple(s.parents), finished, budget_s,
                           self.synced is not None)
                 for s in self.shards.values()
                 if not s.done and s.iterator is not None and self._parents_done(s)]
        started = time.monotonic()
        outcomes = self.runner.run(self, works) if works else []
        read = 0
        for outcome in outcomes:
            self.absorb(outcome)
            read += outcome.records
        elapsed = max(time.monotonic() - started, 1e-6)
        drained = all(o.drained for o in outcomes)
        # A child whose parents ended during this round is read in the next one.
        visited = {work.shard_id for work in works}
        unread = any(s.shard_id not in visited and not s.done and s.iterator is not None
                     and self._parents_done(s) for s in self.shards.values())
        self.stats.caught_up = drained and not unread and not self.dirty and all(
            not s.pending for s in self.shards.values())
        self.stats.records_per_s = round(read / elapsed, 1) if outcomes else 0.0
        self.stats.workers = self.runner.workers
        lags = self._shard_lags()
        self.stats.shards = {s.shard_id: {"records": s.records, "records_per_s": round(s.records_per_s, 1),
                                          "lag_s": round(lags[s.shard_id], 3), "done": s.done}
                             for s in self.shards.values()}
        return read

    def worker(self) -> Capture:
        """A copy to run one ``ShardWork`` on: this capture's rule, client and writer, none of
        its state (each worker's is taken in by ``absorb``)."""
        clone = copy_module.copy(self)
        clone.shards = {}
        clone.dirty = {}
        clone.finished_splits = set()
        clone.touched = None if self.touched is None else set()
        clone.set_aside = {}
        clone.cleared = set()
        clone.synced = None
        clone.stats = type(self.stats)()
        return clone

    def run_shard(self, work: ShardWork) -> ShardOutcome:
        """Read and apply ``work``'s shard, page after page while pages come full, for up to
        its budget. The next page is read while this one is applied."""
        started = time.monotonic()
        shard = ShardState(work.shard_id, work.iterator, list(work.parents))
        self.shards = {shard.shard_id: shard}
        self.finished_splits = set(work.finished)
        self.synced = set() if work.record_keys else None
        records = 0
        page = self._read(self._start_read(work.iterator))
        while True:
            batch, following = page
            full = len(batch) >= PAGE_RECORDS
            ahead = None
            if following is not None and full and time.monotonic() - started < work.budget_s:
                ahead = self._start_read(following)
            self._apply_page(shard, batch)
            records += len(batch)
            shard.iterator = following
            shard.done = following is None
            if ahead is None:
                break
            page = self._read(ahead)
        finished = self.finished_splits - set(work.finished)
        return ShardOutcome(
            shard.shard_id, shard.iterator, shard.done, shard.pending, self.dirty, finished,
            self.touched, self.set_aside, self.cleared, self.stats, records, not full,
            time.monotonic() - started, self.synced)

    def absorb(self, outcome: ShardOutcome) -> None:
        """Take in a worker's ``ShardOutcome``: the shard's position (and pages waiting for
        splits), records kept for unfinished splits, rows set aside or carried, counts."""
        shard = self.shards[outcome.shard_id]
        shard.iterator = outcome.iterator
        shard.done = outcome.done
        shard.pending += outcome.pending
        shard.drained = outcome.drained
        shard.records += outcome.records
        shard.records_per_s = outcome.records / max(outcome.elapsed_s, 1e-6)
        for split, keys in outcome.dirty.items():
            into = self.dirty.setdefault(split, {})
            for key, change in keys.items():
                if key in into:
                    into[key].merge(change)
                else:
                    into[key] = change
        self.finished_splits |= outcome.finished
        if self.touched is not None and outcome.touched:
            self.touched |= outcome.touched
        if self.set_aside:
            for key in outcome.cleared:
                self.set_aside.pop(format_key(key), None)
        self.set_aside.update(outcome.set_aside)
        if self.synced is not None and outcome.synced:
            self.synced |= outcome.synced
        got = outcome.stats
        for name in self._counts():
            setattr(self.stats, name, getattr(self.stats, name) + getattr(got, name))
        if got.last_record_ms:
            shard.last_record_ms = max(shard.last_record_ms, got.last_record_ms)
            self.stats.last_record_ms = max(self.stats.last_record_ms, got.last_record_ms)

    def _counts(self) -> tuple[str, ...]:
        """The stats a worker's outcome adds to this capture's."""
        return COUNTS

    def _parents_done(self, shard: ShardState) -> bool:
        return all(self.shards[p].done and not self.shards[p].pending
                   for p in shard.parents if p in self.shards)

    def _discover(self) -> None:
        """Shards born of splits and merges since the last round."""
        for shard in self.raw.describe_shards(self.stream_id):
            if shard.shard_id in self.shards:
                continue
            parents = [p for p in (shard.parent_id, shard.parent_sibling_id) if p]
            iterator = self._call(self.raw.shard_iterator, self.stream_id, shard.shard_id)
            self.shards[shard.shard_id] = ShardState(shard.shard_id, iterator, parents)

    def _start_read(self, iterator: str) -> cf.Future[StreamPage]:
        """The page at ``iterator``, read on the event loop while this thread goes on."""
        return self.raw.start_call("GetStreamRecord", stream_request(iterator, PAGE_RECORDS), StreamPage)

    def _read(self, page: cf.Future[StreamPage]) -> tuple[list[Record], str | None]:
        encoded, following = stream_page(self._call(page.result))
        return read_records(encoded, self.transform.key_sources), following

    def _call(self, method: Callable[..., Any], *args: Any) -> Any:
        try:
            return method(*args)
        except ts.OTSServiceError as exc:
            if exc.code in ("OTSTrimmedDataAccess", "OTSObjectNotExist"):
                raise CaptureLost(
                    f"the stream of {self.job.source.name} no longer has the records capture needs "
                    f"({exc.code}: the capture was stopped longer than the stream keeps records, "
                    "or the stream was turned off). Changes may have been missed, so this rewrite "
                    "cannot be finished safely: run `tsmigrate rewrite abort "
                    f"{self.job.target.name}` then `tsmigrate apply` to start it again, and keep "
                    "capture running (`tsmigrate rewrite follow`) until cut-over"
                ) from None
            raise

    # -- applying records ------------------------------------------------------------------------

    def _old_target_key(self, record: Record) -> Key | None:
        """The target key the row had before this write (from the origin columns), or None when
        the row did not exist before."""
        origin = record.origin
        if origin is None:
            if self.transform.key_sources:
                return None
            # The new key is built from source key columns only: the record's key says it.
            return self.transform.key_of(record.key, {})
        try:
            return self.transform.key_of(record.key, origin)
        except TsmigrateError:  # the old row could not be mapped: it never had a target row
            return None

    def _apply_page(self, shard: ShardState, records: Sequence[Record]) -> None:
        with _uncollected():
            self._apply_records(shard, records)

    def _apply_records(self, shard: ShardState, records: Sequence[Record]) -> None:
        read_ms = int(time.time() * 1000)
        now: dict[Key, Change] = {}
        waiting: set[int] = set()
        running: set[int] = set()  # splits seen unfinished in this page: asked once per page
        stats, touched, finished = self.stats, self.touched, self.finished_splits
        old_target_key, split_of, change_type = self._old_target_key, self.split_of, self.change_type
        for record in records:
            source_key = record.key
            old = old_target_key(record)
            split = split_of(source_key)
            if touched is not None:
                touched.add(split)
            # The newest stamp of its cells: the record's time (``record_time``), else its read's
            stamped = max(filter(None, map(_STAMP, record.cells)), default=None)
            if stamped is None:
                when = read_ms
            else:
                when = stamped
                if stamped > stats.last_record_ms:
                    stats.last_record_ms = stamped
            if split in finished or (split not in running and self.split_done(split)):
                finished.add(split)
                into = now
            else:
                into = self.dirty.setdefault(split, {})
                waiting.add(split)
                running.add(split)
                stats.deferred += 1
            change = into.get(source_key)
            if change is None:
                change = into[source_key] = change_type()
            change.add(record, when, old)
        if now:
            self.sync(now)
            self.stats.applied += len(now)
        if waiting:
            assert shard.iterator is not None
            shard.pending.append(Pending(shard.iterator, waiting))

    def _resolve_finished_splits(self) -> None:
        for split in list(self.dirty):
            if split in self.finished_splits or self.split_done(split):
                self.finished_splits.add(split)
                keys = self.dirty.pop(split)
                self.sync(keys)
                self.stats.resynced += len(keys)
        for shard in self.shards.values():
            for page in shard.pending:
                page.splits -= self.finished_splits
            while shard.pending and not shard.pending[0].splits:
                shard.pending.pop(0)

    def sync(self, keys: dict[Key, Change]) -> None:
        """Apply the changes of ``keys`` to the target, cell by cell: each source key's current
        row (re-read) and its target rows (the current one, and those it left) are read in
        batches, the changes merged in (``_vacate``, ``_merge``), and only the differences
        written, batched (``_write``). Cells stay encoded throughout (``RawCell``).

        A target that takes no UpdateRow gets whole rows, each guarded by what was read: a row
        written meanwhile refuses the write, and its keys are read and merged again. A row that
        cannot be carried (its transform fails, the service refuses it for good, or it keeps
        changing under capture) is set aside (``set_aside``) and capture goes on."""
        if self.synced is not None:
            self.synced.update(keys)
        items = list(keys.items())
        for start in range(0, len(items), SYNC_KEYS):
            batch = dict(items[start:start + SYNC_KEYS])
            for attempt in range(GUARD_ATTEMPTS):
                batch = self._sync_refused(batch)
                if not batch:
                    break
                self.stats.guard_retries += len(batch)
                time.sleep(min(0.02 * 2 ** attempt, 0.5))
            for source_key in batch:
                self._put_aside(source_key, f"its row in {self.job.target.name} kept changing while "
                                f"capture wrote it ({GUARD_ATTEMPTS} attempts)")

    def _sync_refused(self, batch: dict[Key, Change]) -> dict[Key, Change]:
        """``_sync_batch``; a row the service refuses for good is set aside, the others synced
        one by one. Returns the keys to read and merge again."""
        from tsmigrate.rewrite.writer import RowRefused

        try:
            return self._sync_batch(batch)
        except RowRefused as exc:
            if len(batch) == 1:
                self._put_aside(next(iter(batch)), str(exc))
                return {}
        again: dict[Key, Change] = {}
        for source_key, change in batch.items():
            try:
                again.update(self._sync_batch({source_key: change}))
            except RowRefused as exc:
                self._put_aside(source_key, str(exc))
        return again

    def _read_batch(self, batch: dict[Key, Change]) -> tuple[list[Planned], dict[Key, _TargetRow]]:
        """The source rows of ``batch`` as read now, each with its target key and cells (a row
        that cannot be transformed is set aside), and the target rows they map to and left."""
        target = self.job.target
        current = read_raw_rows(self.raw, self.job.source.name, list(batch),
                                copy.versions(self.job), self.transform.key_sources)
        planned = []
        wanted: list[Key] = []
        for source_key, change in batch.items():
            row = current.get(source_key)
            try:
                new_key, cells = (None, ()) if row is None else self._target_of(source_key, row)
            except TsmigrateError as exc:
                self._put_aside(source_key, getattr(exc, "reason", None) or str(exc))
                continue
            planned.append(Planned(source_key, change, row, cells, new_key))
            if new_key:
                wanted.append(new_key)
            wanted += change.olds
        found = _batch_get(self.raw, target.name, wanted, target.options.max_versions)
        return planned, {key: _TargetRow.of(key, found.get(key)) for key in dict.fromkeys(wanted)}

    def _sync_batch(self, batch: dict[Key, Change]) -> dict[Key, Change]:
        """Sync one batch (see ``sync``); returns the source keys whose guarded write was refused."""
        planned, rows = self._read_batch(batch)
        # The target keys rows left first: a row moving in within the same batch merges
        # into what they leave.
        for source_key, change, _row, _cells, new_key in planned:
            for old, when in change.olds.items():
                if old != new_key:
                    self._vacate(rows[old], source_key, when)
        for _source_key, change, _row, cells, new_key in planned:
            if new_key is not None:
                # It arrived, or left another key: olds hold a key besides new_key
                arrived = change.arrived or len(change.olds) > (new_key in change.olds)
                self._merge(rows[new_key], cells, change, arrived)
        refused = set(self._write(rows.values()))
        again = {}
        for source_key, change, _row, _cells, new_key in planned:
            if refused and refused.intersection([new_key, *change.olds]):
                again[source_key] = change
            else:
                self._carried(source_key)
        return again

    def _carried(self, source_key: Key) -> None:
        """A row synced: off the set-aside list, if it was on it (here, or where ``absorb``
        takes this worker's outcome in). Its key is formatted only where the list has any."""
        if self.set_aside:
            self.set_aside.pop(format_key(source_key), None)
        self.cleared.add(source_key)

    def _put_aside(self, source_key: Key, reason: str) -> None:
        """A row capture cannot carry: named (with why) in the position, so `rewrite status`
        shows it and switch and finish refuse until it is fixed (a later change of the row that
        can be carried takes it off the list)."""
        self.set_aside[format_key(source_key)] = {"reason": reason[:500], "at_ms": int(time.time() * 1000)}

    def _target_of(self, source_key: Key, row: RawRow) -> tuple[Key, Sequence[RawCell]]:
        """The target key and cells of a source row (``RowTransform.apply`` on encoded cells):
        only the values the new key needs are decoded; fields of the old key that become
        attributes are encoded, stamped like the row's newest cell."""
        transform = self.transform
        if not transform.added:  # the key alone needs the values
            key = transform.key_of(source_key, row.values, source_key)
            dropped = transform.dropped
            return key, tuple([c for c in row.cells if c[0] not in dropped]) if dropped else row.cells
        values = transform.natural(source_key, list(row.values.items()))
        key = tuple(transform.target_key(values, list(source_key)))  # (name, value) pairs
        dropped = transform.dropped
        # Tuples: the cells live as long as their batch, and a tuple of tuples the collector can
        # leave alone (a list it would carry into its oldest generation).
        cells = tuple([c for c in row.cells if c[0] not in dropped]) if dropped else tuple(row.cells)
        extra = []
        if transform.added:
            present = {c[0] for c in row.cells}
            extra = [f for f in transform.added if f not in present and f in values]
        if extra:
            stamp = max((c[1] for c in row.cells), default=transform.default_timestamp)
            added = [(f, stamp, *plainbuffer.encode_cell(f, values[f], stamp)) for f in extra]
            cells = tuple(sorted([*cells, *added], key=lambda c: c[0]))  # stable: versions keep their order
        return key, cells

    def _vacate(self, row: _TargetRow, source_key: Key, when: int) -> None:
        """The target row ``source_key`` left (its key changed, or the source row is gone):
        its cells not newer than ``when`` go, and the row when nothing newer remains; only while
        it still belongs to that source key (another row may have moved in meanwhile)."""
        if not row.exists:
            return
        recover = self.transform.recover_columns
        try:
            owner = _key(self.transform.source_key_of(list(row.key), row.values_of(recover)))
        except TsmigrateError:
            return  # a row that does not tell its source key is no source row's to remove
        if owner != source_key:
            return
        if row.drop(None, when):
            self.stats.moved += 1
        if not row.cells:
            row.exists = False

    def _merge(self, row: _TargetRow, source: Sequence[RawCell], change: Change,
               arrived: bool) -> None:
        """Merge the source's cells (the transformed row) into the target row: the columns the
        change touched take the source's versions, and lose the versions the source no longer has
        that are not newer than the change; untouched columns are left as they are, unless the row
        just arrived at this key, which takes every source version (``merge_columns``)."""
        added = self.transform.added
        wrote = merge_columns(row.cells, source, change.columns, change.row_time, arrived, added)
        if not (row.exists or wrote or arrived or change.row_time is not None):
            return  # nothing of it is left in the target, and the change brings nothing
        row.exists = True
        if not added:
            return
        # Fields of the source key kept as attributes: stamped like the source row's newest
        # cell, so they follow it; the versions they replace go.
        versions: dict[str, list[tuple[int, Encoded]]] = {}
        for name, stamp, cell, crc in source:
            versions.setdefault(name, []).append((stamp, (cell, crc)))
        for name in added:
            kept = {(name, stamp) for stamp, _ in versions.get(name, ())}
            for stamp, encoded in versions.get(name, ()):
                row.cells[(name, stamp)] = encoded
            newest = max((stamp for stamp, _ in versions.get(name, ())), default=change.time)
            row.drop(name, max(change.time, newest), kept)

    def _write(self, rows: Iterable[_TargetRow], table: Any = None) -> list[Key]:
        """Write what changed in ``rows`` of ``table`` (the target unless named): UpdateRows of
        the versions put (the cells' bytes as read, compared by those bytes) and deleted,
        DeleteRow for rows that are gone, PutRow of a bare key for a source row without cells. A
        table that takes no UpdateRow (allow_update=False) gets whole rows instead
        (``_write_whole``). A row is deleted only if still as read (``_guard``). Returns the
        keys whose guarded write was refused."""
        table = table or self.job.target
        if not table.options.allow_update:
            return self._write_whole(rows, table)
        updates: list[tuple[list[tuple[str, Any]], list[Any]]] = []
        gone: list[_TargetRow] = []
        bare: list[TargetRow] = []
        for row in rows:
            if not row.exists:
                if row.existed:
                    gone.append(row)
                continue
            if not row.cells:
                if not row.existed or row.before:
                    bare.append(TargetRow(list(row.key), []))
                continue
            if row.cells == row.before:
                continue
            changes = row_changes(row.before, row.cells, table.options.max_versions)
            if changes:
                updates.append((list(row.key), changes))
        refused: list[Key] = []
        writes: list[Callable[[], Any]] = []  # each on other keys: sent together
        if gone:
            # Guarded by the row as read: a row another shard's worker moved into that key
            # meanwhile (its owner changed) refuses the delete, and the key is merged again.
            declared = sorted({c.name for c in (*table.defined_columns, *table.attributes)})
            guarded = [(list(r.key), self._guard(r, declared)) for r in gone]
            writes.append(lambda: refused.extend(
                _key(key) for key in self.writer.write_whole_rows(self.client, table.name, [], guarded)))
        if bare:
            writes.append(lambda: self.writer.write_rows(self.client, table.name, bare))
        if updates:
            writes.append(lambda: self.writer.update_rows(self.client, table.name, updates))
        if len(writes) == 1:
            writes[0]()
        elif writes:
            list(_io_pool().map(lambda write: write(), writes))
        return refused

    def _write_whole(self, rows: Iterable[_TargetRow], table: Any) -> list[Key]:
        """PutRow of every changed row whole (each cell with its timestamp, the newest
        ``max_versions`` of a column, as the table keeps them) and DeleteRow of rows that are
        gone, each guarded by the row as read (``_guard``)."""
        keep = table.options.max_versions
        declared = sorted({c.name for c in (*table.defined_columns, *table.attributes)})
        puts, deletes = [], []
        for row in rows:
            if not row.exists:
                if row.existed:
                    deletes.append((list(row.key), self._guard(row, declared)))
                continue
            if row.existed and row.cells == row.before:
                continue
            versions: dict[str, list[tuple[int, Encoded]]] = {}
            for (name, stamp), encoded in row.cells.items():
                versions.setdefault(name, []).append((stamp, encoded))
            cells = [encoded for name in sorted(versions)
                     for _, encoded in sorted(versions[name], key=lambda v: -v[0])[:keep]]
            puts.append((list(row.key), cells, self._guard(row, declared)))
        refused = self.writer.write_whole_rows(self.client, table.name, puts, deletes)
        return [_key(key) for key in refused]

    def _guard(self, row: _TargetRow, declared: list[str]) -> bytes:
        """The condition that the row is still as read: absent, or present with the same newest
        value of each column (and still without the declared columns it lacked), as far as
        one condition's ``GUARD_COLUMNS`` comparisons go. A write that changed no value (the same
        values again, with new timestamps) passes it: its cells keep their values, not their
        timestamps."""
        guard_columns = self.writer.GUARD_COLUMNS
        if not row.existed:
            return self.writer.row_condition(pb.EXPECT_NOT_EXIST)
        newest: dict[str, tuple[int, bytes]] = {}
        for (name, stamp), (cell, _) in row.before.items():
            if name not in newest or stamp > newest[name][0]:
                newest[name] = (stamp, cell)
        # Each value compared as its cell holds it (``vtype + payload``), not decoded again.
        values = [(name, _variant_of(cell)) for name, (_, cell) in sorted(newest.items())]
        values = values[:guard_columns]
        absent = [name for name in declared if name not in newest]
        absent = absent[:(guard_columns - len(values)) // 2]  # two comparisons each
        column = self.writer.variants_unchanged(values, absent) if values or absent else None
        return self.writer.row_condition(pb.EXPECT_EXIST, column)


def _variant_of(cell: bytes) -> bytes:
    """The value of a cell read back, encoded as it came (``rowbytes.cell_variant``)."""
    variant = rowbytes.cell_variant(cell)
    if variant is None or variant[0] == plainbuffer.VT_NULL:
        raise plainbuffer.PlainBufferError("a cell read back has no value to compare with")
    return variant


class Planned(NamedTuple):
    """A source key of a batch being synced: its change, its row as read now (None: gone), and
    that row's target key and cells (None, []: gone)."""

    source_key: Key
    change: Change
    row: RawRow | None
    cells: Sequence[RawCell]
    new_key: Key | None


class RawRow(NamedTuple):
    """A row as read, its attribute cells encoded."""

    cells: tuple[RawCell, ...]  # every version, in the read's order (a column's newest first)
    values: dict[str, Any]  # the newest value of each column asked for, decoded


_pool: cf.ThreadPoolExecutor | None = None


def _io_pool() -> cf.ThreadPoolExecutor:
    """Threads for the kinds of writes of one batch sent together (shared by this process's
    captures; a write never waits on another one, so sharing cannot deadlock); each kind's
    requests go out together on the event loop."""
    global _pool
    if _pool is None:
        _pool = cf.ThreadPoolExecutor(IO_THREADS, thread_name_prefix="capture-io")
    return _pool


class BatchGetRows:
    """A BatchGetRowResponse as ``_batch_get`` reads it, for ``RawClient.call``: ``rows``, the
    (is_ok, row) of each row of its first table (an IndexError when it has none). Read in one
    compiled pass over the answer where it is built (``parse_in_python`` otherwise, the same
    values), without a message object per row."""

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        self._rows: list[tuple[bool, bytes]] | None = None

    @property
    def rows(self) -> list[tuple[bool, bytes]]:
        if self._rows is None:
            raise IndexError("the BatchGetRow answer has no table")
        return self._rows

    def ParseFromString(self, body: bytes) -> None:  # the message API RawClient.call uses
        if rowbytes._rowwalk is None:
            self.parse_in_python(body)
            return
        try:
            self._rows = rowbytes._rowwalk.batch_get_rows(body)
        except ValueError as exc:
            raise DecodeError(f"a BatchGetRow answer is malformed ({exc})") from None

    def parse_in_python(self, body: bytes) -> None:
        tables = pb.BatchGetRowResponse.FromString(body).tables
        self._rows = [(r.is_ok, r.row) for r in tables[0].rows] if tables else None


def _batch_get(raw: RawClient, table: str, keys: list[Key], versions: int) -> dict[Key, bytes]:
    """The current rows of ``keys`` (every version, with timestamps) as BatchGetRow returns
    them (HEADER + row); absent rows are left out. Rows the service failed to read in a batch
    (throttled) are asked again, with capped backoff."""
    found: dict[Key, bytes] = {}
    todo = list(dict.fromkeys(keys))
    delay = 0.05

    def request(chunk: list[Key]) -> pb.BatchGetRowRequest:
        request = pb.BatchGetRowRequest()
        item = request.tables.add(table_name=table, max_versions=max(1, versions))
        item.primary_key.extend([key_row(key) for key in chunk])
        return request

    while todo:
        chunks = [todo[start:start + BATCH_GET] for start in range(0, len(todo), BATCH_GET)]
        # One request per 100 keys, sent together: a page's reads cost one round trip
        responses = raw.call_together("BatchGetRow", [request(chunk) for chunk in chunks], BatchGetRows)
        todo = []
        for chunk, response in zip(chunks, responses, strict=True):
            for key, (ok, row) in zip(chunk, response.rows, strict=True):
                if not ok:
                    todo.append(key)  # asked again below
                elif row:
                    found[key] = row
        if todo:
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
    return found


def read_raw_rows(raw: RawClient, table: str, keys: list[Key], versions: int,
                  wanted: frozenset[str] = frozenset()) -> dict[Key, RawRow]:
    """Current rows by key, their cells kept encoded (``RawCell``); the newest value of each
    column in ``wanted`` decoded. Absent rows are left out."""
    return raw_rows(_batch_get(raw, table, keys, versions), wanted)


def raw_rows(found: dict[Key, bytes], wanted: frozenset[str]) -> dict[Key, RawRow]:
    """``RawRow``s of rows as BatchGetRow returned them (``rowbytes.row_cells``), by key: one
    compiled call for them all where it is built (``raw_rows_in_python`` otherwise)."""
    if rowbytes._rowwalk is None:
        return raw_rows_in_python(found, wanted)
    try:
        return rowbytes._rowwalk.raw_rows(found, wanted, RawRow)
    except ValueError as exc:
        raise plainbuffer.PlainBufferError(f"a row read back is truncated or malformed ({exc})") from None


def raw_rows_in_python(found: dict[Key, bytes], wanted: frozenset[str]) -> dict[Key, RawRow]:
    """``raw_rows`` in Python."""
    rows = {}
    for key, buf in found.items():
        _, cells, values = rowbytes.row_cells_in_python(buf, wanted)
        rows[key] = RawRow(tuple(cells), values)
    return rows


def read_rows(client: Any, table: str, keys: list[Key], versions: int) -> dict[Key, Any]:
    """Current rows, decoded: (name, value, timestamp) tuples, newest version first, by key;
    absent rows are left out; binary values come as bytes. For the checks that compare rows by
    value (recheck, the fence's verification)."""
    return {key: [(c.name, c.value, c.timestamp) for c in plainbuffer.decode_row(buf).cells]
            for key, buf in _batch_get(RawClient(client), table, keys, versions).items()}
