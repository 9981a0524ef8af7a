"""Change capture: the source's stream records, applied to the target while services still write
the source, so the target converges during and after the backfill.

How a record is applied: capture does not replay the record's cells. It re-reads the source
row's current state (every version, with timestamps) and writes its transform to the target,
or deletes the target row when the source row is gone. That is idempotent and insensitive to
order, so records may be applied twice (after a kill) or out of order across shards.

- A row whose new key changed (a column the new key is built from was updated): the record's
  origin columns (the values before the write, see ``prepare``) give the old target key, which
  is deleted, after checking that the row there still belongs to this source key (another row
  may have moved in meanwhile).
- Backfill and capture never race: while a split's backfill runs, records of keys in that split
  are not applied but kept as that split's dirty keys; once the split's checkpoint says done,
  the dirty keys are re-synced (re-read and written), and later records of that split are
  applied directly. So a row deleted at the source is never brought back by a late backfill
  write: the backfill write comes first, the re-sync after it.
- The position kept in ``tsmigrate_state`` (per shard, an iterator) only moves past records
  that are resolved (applied, or re-synced after their split finished): a kill loses nothing,
  the next run reads those records again.
- Shards: a shard's children are read only once its parents (a split has one, a merge two)
  were read to their end, so the records of one key are seen in order.
- Every split a record touches is kept (``touched``, saved with the position): verification
  takes the source totals of a split no record touched from its backfill checkpoint, since the
  stream proves those rows have not changed since the copy read them.
- An iterator that points at trimmed records (the stream expired them, or the capture was
  stopped longer than the stream keeps records) stops the rewrite: the target may have missed
  changes, and the only safe way on is to start the rewrite again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import tablestore as ts
from tablestore import metadata as md

from tsmigrate.errors import TsmigrateError
from tsmigrate.rawclient import RawClient, StreamRecord
from tsmigrate.rewrite import copy, machine

PAGE_RECORDS = 500
BATCH_GET = 100  # BatchGetRow's limit per request

Key = tuple[tuple[str, Any], ...]


class CaptureLost(machine.RewriteError):
    """The stream no longer has records capture needs."""


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


def _key(pk: Iterable[tuple[str, Any]]) -> Key:
    return tuple((name, value) for name, value in pk)


class Capture:
    """Follows the source's stream into the target. ``split_of(key)`` gives the split index of
    a source key; ``split_done(index)`` whether that split's backfill finished."""

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
        # split index -> source key -> old target keys to delete if the row moved away
        self.dirty: dict[int, dict[Key, set[Key]]] = {}
        self.finished_splits: set[int] = set()
        # Splits any record touched since capture started; None: not known (a rewrite prepared
        # before splits were tracked), so verification reads every split's source rows.
        self.touched: set[int] | None = None if touched is None else set(touched)
        self.stats = Stats()

    # -- the position ----------------------------------------------------------------------------

    def position(self) -> dict[str, Any]:
        return {"stream_id": self.stream_id,
                "shards": {s.shard_id: s.checkpoint() for s in self.shards.values()}}

    def lag_s(self) -> float:
        if self.stats.caught_up or not self.stats.last_record_ms:
            return 0.0
        return max(0.0, time.time() - self.stats.last_record_ms / 1000)

    # -- one round over the shards ---------------------------------------------------------------

    def step(self) -> int:
        """Read one page of every readable shard and apply it; resolve the dirty keys of splits
        that finished. Returns the number of records read."""
        self._discover()
        self._resolve_finished_splits()
        read = 0
        drained = True  # every readable shard returned less than a full page: at its end
        visited: set[str] = set()
        for shard in list(self.shards.values()):
            if shard.done or shard.iterator is None:
                continue
            if not self._parents_done(shard):
                continue  # a child waits until its parents were read to their end
            visited.add(shard.shard_id)
            records, following = self._read(shard)
            read += len(records)
            self._apply_page(shard, records)
            shard.iterator = following
            if following is None:
                shard.done = True
            if len(records) >= PAGE_RECORDS:
                drained = False
        # A child whose parents ended during this round is read in the next one.
        unread = any(s.shard_id not in visited and not s.done and s.iterator is not None
                     and self._parents_done(s) for s in self.shards.values())
        self.stats.caught_up = drained and not unread and not self.dirty and all(
            not s.pending for s in self.shards.values())
        return read

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

    def _read(self, shard: ShardState) -> tuple[list[StreamRecord], str | None]:
        assert shard.iterator is not None
        return self._call(self.raw.stream_records, shard.iterator, PAGE_RECORDS)

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

    def _old_target_key(self, record: StreamRecord) -> Key | None:
        """The target key the row had before this write (from the origin columns), or None when
        the row did not exist before."""
        if record.origin is None:
            if self.transform.key_sources:
                return None
            # The new key is built from source key columns only: the record's key says it.
            values = self.transform.natural(record.row.primary_key, [])
            return _key(self.transform.target_key(values))
        cells = [(c.name, c.value, c.timestamp) for c in record.origin.cells]
        try:
            values = self.transform.natural(record.row.primary_key, cells)
            return _key(self.transform.target_key(values))
        except TsmigrateError:  # the old row could not be mapped: it never had a target row
            return None

    def _apply_page(self, shard: ShardState, records: Sequence[StreamRecord]) -> None:
        now: dict[Key, set[Key]] = {}
        waiting: set[int] = set()
        running: set[int] = set()  # splits seen unfinished in this page: asked once per page
        for record in records:
            source_key = _key(record.row.primary_key)
            old = self._old_target_key(record)
            split = self.split_of(source_key)
            if self.touched is not None:
                self.touched.add(split)
            for cell in record.row.cells:
                if cell.timestamp:
                    self.stats.last_record_ms = max(self.stats.last_record_ms, cell.timestamp)
            if split not in running and (split in self.finished_splits or self.split_done(split)):
                self.finished_splits.add(split)
                now.setdefault(source_key, set()).update([old] if old else [])
            else:
                self.dirty.setdefault(split, {}).setdefault(source_key, set()).update(
                    [old] if old else []
                )
                waiting.add(split)
                running.add(split)
                self.stats.deferred += 1
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

    def sync(self, keys: dict[Key, set[Key]]) -> None:
        """Make the target rows of ``keys`` equal to the source's current rows: write the
        transform of each row that exists, delete the old target rows of rows that moved or
        are gone (when they still belong to that source key)."""
        items = list(keys.items())
        for start in range(0, len(items), BATCH_GET):
            batch = items[start:start + BATCH_GET]
            current = self._read_source([k for k, _ in batch])
            writes, deletes = [], []
            for source_key, olds in batch:
                row = current.get(source_key)
                new_key = None
                if row is not None:
                    target = self.transform.apply(list(source_key), row)
                    new_key = _key(target.primary_key)
                    writes.append(target)
                deletes += [(old, source_key) for old in olds if old != new_key]
            self._delete_moved(deletes)
            if writes:
                self.writer.write_rows(self.client, self.job.target.name, writes)

    def _delete_moved(self, candidates: list[tuple[Key, Key]]) -> None:
        """Delete old target rows that still belong to the source key that left them."""
        if not candidates:
            return
        rows = self._read_rows(self.job.target.name, [old for old, _ in candidates],
                               self.job.target.options.max_versions)
        gone = []
        for old, source_key in candidates:
            row = rows.get(old)
            if row is None:
                continue
            owner = _key(self.transform.source_key_of(list(old), row))
            if owner == source_key:
                gone.append(list(old))
        if gone:
            self.writer.delete_keys(self.client, self.job.target.name, gone)
            self.stats.moved += len(gone)

    def _read_source(self, keys: list[Key]) -> dict[Key, list[tuple[str, Any, int]]]:
        return read_rows(self.client, self.job.source.name, keys, copy.versions(self.job))

    def _read_rows(self, table: str, keys: list[Key], versions: int) -> dict[Key, Any]:
        return read_rows(self.client, table, keys, versions)


def read_rows(client: Any, table: str, keys: list[Key], versions: int) -> dict[Key, Any]:
    """Current rows (all versions, with timestamps) by key; absent rows are left out. Rows the
    service failed to read in a batch (throttled) are asked again, with capped backoff."""
    found: dict[Key, Any] = {}
    todo = list(dict.fromkeys(keys))
    delay = 0.05
    while todo:
        retry = []
        for start in range(0, len(todo), BATCH_GET):
            chunk = todo[start:start + BATCH_GET]
            request = ts.BatchGetRowRequest()
            request.add(md.TableInBatchGetRowItem(table, [list(k) for k in chunk],
                                                  max_version=max(1, versions)))
            result = client.batch_get_row(request)
            for key, item in zip(chunk, result.get_result_by_table(table), strict=True):
                if not item.is_ok:
                    retry.append(key)
                elif item.row is not None:
                    found[key] = [tuple(c) for c in item.row.attribute_columns]
        todo = retry
        if todo:
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
    return found
