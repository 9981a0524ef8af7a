"""BatchWriteRow within the service's limits, retrying only the rows that failed.

Rows arrive encoded (PlainBuffer, HEADER + row) and go out in requests of at most 200 rows and
4 MB. A request the service rejects as a whole (throttling, a busy partition, a lost connection)
is sent again by the client's retry policy (``tsmigrate.instance.retry``); in a request that went through,
only the rows that failed with a retryable error are sent again, after the same policy's capped,
jittered delays. A row that fails for good raises WriteError naming its key.

With ``in_flight`` > 1 the requests of one ``put`` are sent that many at a time, so the service
always has the next request while the client reads an answer (or waits for its interpreter lock);
``put`` returns once every row is written, so a caller's checkpoint still follows its writes.
``put_async`` starts the writes and returns a wait: a caller can queue its next rows before it
waits for these and records them, so the requests run on across its checkpoint round trips.
Without a pool, the requests of one call go out together on the process's event loop
(``send_together``, ``RawClient.call_together``): capture's writes, which come in a page at a time.

``RateLimiter`` paces rows per second (``--max-rows-per-s``), shared by the threads of a process.
"""

from __future__ import annotations

import operator
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import attrs
from tablestore import OTSClient
from tablestore.error import OTSServiceError
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.contract import rowbytes
from tsmigrate.contract.rowbytes import key_cells
from tsmigrate.contract.transform import RowTransform, TargetRow, format_key
from tsmigrate.errors import TsmigrateError
from tsmigrate.instance import adapter, retry
from tsmigrate.instance.rawclient import RawClient
from tsmigrate.wire.plainbuffer import (
    HEADER,
    OP_DELETE_ONE,
    assemble_row,
    crc8_bytes,
    decode_row,
    encode_primary_key_cells,
    encode_value,
)
from tsmigrate.wire.protowire import varint

MAX_BATCH_ROWS = 200
MAX_BATCH_BYTES = 4 * 1024 * 1024 - 64 * 1024  # the service's 4 MB, less the request's framing
MAX_CELLS_PER_UPDATE = 1024  # the service's limit on the columns of one row write
# A row write's column condition holds at most 10 nodes: an AND and 9 comparisons.
GUARD_COLUMNS = 9
_IS_OK = operator.attrgetter("is_ok")
CONDITION_FAILED = "OTSConditionCheckFail"

# One cell of an UpdateRow: ("put", name, (encoded cell, its checksum), timestamp), the cell as
# read (capture passes cells through as bytes), or ("delete", name, None, timestamp), deleting
# that one version (UpdateType.DELETE).
CellChange = tuple[str, str, Any, int]


class WriteError(TsmigrateError):
    """Rows could not be written to the target."""


class RowRefused(WriteError):
    """The service refused one row for good (not a retryable error): the row, not the request,
    is at fault (a cell too large, a timestamp out of the table's range, ...)."""


class RateLimiter:
    """A token bucket of rows per second (None: unlimited), safe to share between threads."""

    def __init__(self, rows_per_s: float | None) -> None:
        self.rate = rows_per_s
        self._lock = threading.Lock()
        self._next = time.monotonic()

    def acquire(self, rows: int) -> None:
        if not self.rate:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + rows / self.rate
        if start > now:
            time.sleep(start - now)


@attrs.define
class WriteStats:
    rows: int = 0
    requests: int = 0
    retried_rows: int = 0


class BatchWriter:
    def __init__(
        self,
        client: OTSClient,
        table: str,
        limiter: RateLimiter | None = None,
        policy: retry.TsmigrateRetryPolicy | None = None,
        in_flight: int = 1,
    ) -> None:
        self.raw = RawClient(client)
        self.table = table
        self.limiter = limiter or RateLimiter(None)
        self.policy = policy or retry.policy_of(self.raw.client) or retry.RETRY_POLICY
        self.stats = WriteStats()
        self._stats_lock = threading.Lock()
        self._pool = (ThreadPoolExecutor(in_flight, thread_name_prefix="rewrite-write")
                      if in_flight > 1 else None)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def __enter__(self) -> BatchWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def put(self, rows: Sequence[bytes]) -> None:
        """Write encoded rows (HEADER + row each), whole rows, timestamps as given."""
        self._write(pb.PUT, rows)

    def put_async(self, rows: Sequence[bytes]) -> Callable[[], None]:
        """Start writing encoded rows; the returned call returns once every one is written
        (raising the first failure). Without a pool of writers, they are written before this
        returns."""
        if self._pool is None:
            self._write(pb.PUT, rows)
            return _written
        sent = [self._pool.submit(self._send, pb.PUT, batch) for batch in _batches(rows)]
        return lambda: _wait_all(sent)

    def delete(self, keys: Sequence[bytes]) -> None:
        """Delete rows by encoded key (HEADER + a row with the delete marker)."""
        self._write(pb.DELETE, keys)

    def update(self, rows: Sequence[bytes]) -> None:
        """Update rows: encoded UpdateRow changes (HEADER + a row whose cells carry their
        operation, see ``encode_update``)."""
        self._write(pb.UPDATE, rows)

    def _write(self, kind: int, rows: Sequence[bytes]) -> None:
        batches = list(_batches(rows))
        if self._pool is None:
            self.send_together(kind, batches)
        elif len(batches) == 1:
            self._send(kind, batches[0])
        else:
            _wait_all([self._pool.submit(self._send, kind, batch) for batch in batches])

    def _send(self, kind: int, rows: list[bytes], conditions: Sequence[bytes] | None = None) -> list[int]:
        """Write one request's ``rows``, sending again those that failed with a retryable error.
        ``conditions``: an encoded condition per row (``row_condition``; None: IGNORE each).
        Returns the positions (in ``rows``) of the rows whose condition did not hold: nothing
        was written for them."""
        self.limiter.acquire(len(rows))
        pending, pending_conditions = rows, conditions
        positions: Sequence[int] = range(len(rows))  # of the pending rows, in ``rows``
        unmet: list[int] = []
        attempt = 0
        while True:
            failed, error, refused = self._request(kind, pending, pending_conditions)
            unmet += [positions[i] for i in refused]
            if not failed or error is None:
                with self._stats_lock:
                    self.stats.rows += len(rows)
                return sorted(unmet)
            if attempt >= self.policy.max_retries:
                raise self._gave_up(len(failed), attempt + 1, pending[failed[0]], error)
            with self._stats_lock:
                self.stats.retried_rows += len(failed)
            time.sleep(self.policy.get_retry_delay(attempt, error, "BatchWriteRow"))
            attempt += 1
            positions = [positions[i] for i in failed]
            pending = [pending[i] for i in failed]
            if pending_conditions is not None:
                pending_conditions = [pending_conditions[i] for i in failed]

    def write_guarded(self, kind: int, rows: Sequence[bytes], conditions: Sequence[bytes]) -> list[int]:
        """Write ``rows`` (pb.PUT or pb.DELETE), each under its condition (``row_condition``);
        returns the positions of the rows whose condition did not hold: nothing was written for
        them."""
        batches = list(_batches(rows))
        if not batches:
            return []
        lows = [0]
        for batch in batches[:-1]:
            lows.append(lows[-1] + len(batch))
        refused = self.send_together(kind, batches, [conditions[low:low + len(batch)]
                                                     for low, batch in zip(lows, batches, strict=True)])
        return [low + i for low, positions in zip(lows, refused, strict=True) for i in positions]

    def send_together(self, kind: int, batches: Sequence[list[bytes]],
                      conditions: Sequence[Sequence[bytes] | None] | None = None) -> list[list[int]]:
        """``_send`` of each of ``batches`` (a request each), sent at once
        (``RawClient.call_together``); the rows that failed with a retryable error go again
        together, after the policy's delay. Returns, per batch, the positions of the rows whose
        condition did not hold."""
        for batch in batches:
            self.limiter.acquire(len(batch))
        # Per batch: the rows still to send, their conditions, their positions in the batch
        pending = [(batch, conditions[i] if conditions else None, range(len(batch)))
                   for i, batch in enumerate(batches)]
        unmet: list[list[int]] = [[] for _ in batches]
        active = list(range(len(batches)))
        attempt = 0
        while active:
            bodies = [batch_write_request(self.table, kind, pending[i][0], pending[i][1]) for i in active]
            with self._stats_lock:
                self.stats.requests += len(bodies)
            with adapter.service_errors(f"BatchWriteRow to {self.table!r}"):
                responses = self.raw.call_together("BatchWriteRow", bodies, pb.BatchWriteRowResponse)
            again, error = [], None
            for i, response in zip(active, responses, strict=True):
                rows, conds, positions = pending[i]
                failed, failure, refused = self._results(rows, conds, response)
                unmet[i] += [positions[j] for j in refused]
                if failed and failure is not None:
                    again.append(i)
                    error = failure
                    pending[i] = ([rows[j] for j in failed],
                                  None if conds is None else [conds[j] for j in failed],
                                  [positions[j] for j in failed])
                else:
                    with self._stats_lock:
                        self.stats.rows += len(batches[i])
            if not again:
                break
            assert error is not None
            if attempt >= self.policy.max_retries:
                raise self._gave_up(sum(len(pending[i][0]) for i in again), attempt + 1,
                                    pending[again[0]][0][0], error)
            with self._stats_lock:
                self.stats.retried_rows += sum(len(pending[i][0]) for i in again)
            time.sleep(self.policy.get_retry_delay(attempt, error, "BatchWriteRow"))
            attempt += 1
            active = again
        return [sorted(positions) for positions in unmet]

    def _gave_up(self, rows: int, attempts: int, first: bytes, error: OTSServiceError) -> WriteError:
        key = format_key(decode_row(first).primary_key)
        return WriteError(
            f"{rows} rows could not be written to {self.table!r} after {attempts} attempts, first "
            f"{key}: {error.code} {error.message}; run the rewrite again to continue from its checkpoints"
        )

    def _request(self, kind: int, rows: list[bytes], conditions: Sequence[bytes] | None
                 ) -> tuple[list[int], OTSServiceError | None, list[int]]:
        """Send once (the client's policy retries a refused request); the positions of the rows
        that failed with a retryable error, that error, and the positions of the rows whose
        condition did not hold."""
        body = batch_write_request(self.table, kind, rows, conditions)
        with self._stats_lock:
            self.stats.requests += 1
        with adapter.service_errors(f"BatchWriteRow to {self.table!r}"):
            response = self.raw.call("BatchWriteRow", body, pb.BatchWriteRowResponse)
        return self._results(rows, conditions, response)

    def _results(self, rows: list[bytes], conditions: Sequence[bytes] | None, response: Any
                 ) -> tuple[list[int], OTSServiceError | None, list[int]]:
        """``_request``'s reading of a BatchWriteRow answer to ``rows``."""
        failed: list[int] = []
        refused: list[int] = []
        error = None
        results = response.tables[0].rows
        if len(results) != len(rows):
            raise WriteError(f"BatchWriteRow to {self.table!r} answered {len(results)} rows of {len(rows)}")
        if all(map(_IS_OK, results)):  # the common answer, checked without a Python loop
            return failed, error, refused
        for position in [i for i, result in enumerate(results) if not result.is_ok]:
            result = results[position]
            if conditions is not None and result.error.code == CONDITION_FAILED:
                refused.append(position)
                continue
            exc = OTSServiceError(0, result.error.code, result.error.message)
            if not retry.retryable(exc, "BatchWriteRow"):
                key = format_key(decode_row(rows[position]).primary_key)
                raise RowRefused(
                    f"row {key} of {self.table!r} was refused: {result.error.code} {result.error.message}"
                )
            failed.append(position)
            error = exc
        return failed, error, refused


# BatchWriteRowRequest encoded here rather than through the message classes: a row took an
# object and two field assignments, 1.9 us of CPU against 0.3 (200 rows of 200 bytes, upb), a
# tenth of the copy's whole budget per row. tables(1) { table_name(1), rows(2)* { type(1),
# row_change(2), condition(3) { row_existence(1) = IGNORE } } }, the fields of
# table_store.proto; tests/rewrite/test_writer.py parses it back with them.
_CONDITION_IGNORE = b"\x1a\x02\x08" + bytes((pb.IGNORE,))


def batch_write_request(table: str, kind: int, rows: Sequence[bytes],
                        conditions: Sequence[bytes] | None = None) -> bytes:
    """The BatchWriteRowRequest of ``rows`` (encoded rows, HEADER + row each) for ``table``,
    each of operation ``kind`` (pb.PUT, UPDATE, DELETE) with row existence IGNORE, or with the
    encoded ``Condition`` given for it (``row_condition``)."""
    head = b"\x08" + bytes((kind,)) + b"\x12"  # type, then row_change's tag
    parts = []
    for index, row in enumerate(rows):
        condition = _CONDITION_IGNORE if conditions is None else conditions[index]
        size = len(row)
        length = varint(size)
        parts += (b"\x12", varint(len(head) + len(condition) + len(length) + size), head, length,
                  row, condition)
    name = table.encode("utf-8")
    entry = b"".join([b"\x0a", varint(len(name)), name, *parts])
    return b"\x0a" + varint(len(entry)) + entry


def row_condition(existence: int, column_condition: bytes | None = None) -> bytes:
    """A row's condition in ``batch_write_request`` (field 3): the row existence expected
    (pb.EXPECT_EXIST, EXPECT_NOT_EXIST, IGNORE) and an encoded column condition (a Filter)."""
    inner = b"\x08" + bytes((existence,))
    if column_condition is not None:
        inner += b"\x12" + varint(len(column_condition)) + column_condition
    return b"\x1a" + varint(len(inner)) + inner


def _wait_all(sent: list[Future[None]]) -> None:
    """Every request is waited for; then the first failure is raised."""
    wait(sent)
    for request in sent:
        request.result()


def _written() -> None:
    """The wait of writes that are already done."""


def _batches(rows: Sequence[bytes]) -> Iterator[list[bytes]]:
    """Consecutive requests' rows, each within the service's row count and size."""
    rows = list(rows)
    low = 0
    while low < len(rows):
        batch = rows[low : low + MAX_BATCH_ROWS]
        if sum(map(len, batch)) > MAX_BATCH_BYTES:  # large rows: as many as fit (at least one)
            size = count = 0
            for row in batch:
                if count and size + len(row) > MAX_BATCH_BYTES:
                    break
                size += len(row)
                count += 1
            batch = batch[:count]
        yield batch
        low += len(batch)


def encode_delete(key: Sequence[tuple[str, Any]]) -> bytes:
    encoded = None if rowbytes._rowwalk is None else rowbytes._rowwalk.key_cells(key)
    pk_cells, crcs = encode_primary_key_cells(key) if encoded is None else encoded
    return HEADER + assemble_row(pk_cells, crcs, (), delete_marker=True)


_pack_len = struct.Struct("<i").pack
_pack_ts = struct.Struct("<q").pack


def _delete_version_cell(name: str, timestamp: int) -> tuple[bytes, int]:
    """A cell deleting one version (UpdateType.DELETE, the SDK's ``(name, None, ts)``): name,
    the operation, the timestamp; its checksum covers the timestamp before the operation, as
    the SDK's writer computes it."""
    raw = name.encode("utf-8")
    packed = _pack_ts(timestamp)
    crc = crc8_bytes(crc8_bytes(crc8_bytes(0, raw), packed), bytes((OP_DELETE_ONE,)))
    cell = b"".join((b"\x03\x04", _pack_len(len(raw)), raw, bytes((0x06, OP_DELETE_ONE)),
                     b"\x07", packed, bytes((0x0A, crc))))
    return cell, crc


def encode_update(key: Sequence[tuple[str, Any]], cells: Sequence[CellChange]) -> bytes:
    """HEADER + one UpdateRow change: puts of versions (encoded cells, see ``CellChange``) and
    deletes of one version each. The service takes each column name once per UpdateRow
    (``update_rows`` splits a row's changes into rounds accordingly)."""
    pk_cells, crcs = key_cells(key)
    encoded = [value if op == "put" else _delete_version_cell(name, ts)
               for op, name, value, ts in cells]
    return HEADER + assemble_row(pk_cells, crcs, encoded)


def update_rounds(cells: Sequence[CellChange]) -> list[list[CellChange]]:
    """A row's cell changes as successive UpdateRows: each names a column once (the service
    refuses a name twice in one UpdateRow) and holds at most MAX_CELLS_PER_UPDATE cells; the
    changes of a column keep the order given (capture's ``ordered_changes`` decides it)."""
    by_name: dict[str, list[CellChange]] = {}
    for cell in cells:
        by_name.setdefault(cell[1], []).append(cell)
    rounds: list[list[CellChange]] = []
    for changes in by_name.values():
        index = 0  # each change of a column goes to a later round than the one before
        for cell in changes:
            while index < len(rounds) and len(rounds[index]) >= MAX_CELLS_PER_UPDATE:
                index += 1
            if index == len(rounds):
                rounds.append([])
            rounds[index].append(cell)
            index += 1
    return rounds


def update_bodies(key: Sequence[tuple[str, Any]], cells: Sequence[CellChange]) -> list[bytes]:
    """A row's cell changes as its UpdateRows (``update_rounds``), each encoded
    (``encode_update``): compiled where built (``update_bodies_in_python`` otherwise, the same
    bytes)."""
    if rowbytes._rowwalk is not None:
        pk_cells, crcs = key_cells(key)
        bodies = rowbytes._rowwalk.update_bodies(pk_cells, crcs, cells, MAX_CELLS_PER_UPDATE)
        if bodies is not None:
            return bodies
    return update_bodies_in_python(key, cells)


def update_bodies_in_python(key: Sequence[tuple[str, Any]], cells: Sequence[CellChange]) -> list[bytes]:
    """``update_bodies`` in Python."""
    return [encode_update(key, cells_of_round) for cells_of_round in update_rounds(cells)]


def update_rows(client: OTSClient, table: str,
                rows: Sequence[tuple[Sequence[tuple[str, Any]], Sequence[CellChange]]]) -> None:
    """Apply cell changes to rows (UpdateRow items of BatchWriteRow, 200 rows and 4 MB a
    request): each row's rounds (see ``update_rounds``) in order, a round in a later request than
    the one before it, so a request never holds one row twice; requests are filled in that order
    (``update_requests``), the first rounds first, and sent in waves (``update_waves``); for
    change capture."""
    bodies = [update_bodies(key, cells) for key, cells in rows]
    batch = BatchWriter(client, table)
    for wave in update_waves(bodies, list(update_requests(bodies))):
        batch.send_together(pb.UPDATE, wave)


def update_waves(bodies: Sequence[Sequence[bytes]], requests: list[list[bytes]]) -> list[list[list[bytes]]]:
    """``requests`` (of ``update_requests``) in waves sent one after the other, each wave's
    together: a request goes in the wave after the one holding the round before each of its
    rows', so a row's rounds are written in order."""
    row_of = {id(body): row for row, rounds in enumerate(bodies) for body in rounds}
    wave_of_row: dict[int, int] = {}
    waves: list[list[list[bytes]]] = []
    for request in requests:
        rows_in = [row_of[id(body)] for body in request]
        wave = max((wave_of_row[row] + 1 for row in rows_in if row in wave_of_row), default=0)
        if wave == len(waves):
            waves.append([])
        waves[wave].append(request)
        wave_of_row.update(dict.fromkeys(rows_in, wave))
    return waves


def update_requests(rows: Sequence[Sequence[bytes]]) -> Iterator[list[bytes]]:
    """The requests that write ``rows`` (each row's encoded rounds, in order), as full as the
    service allows and as few as the rounds allow: each request takes the next round of the rows
    with the most rounds left first (so the longest rows never wait at the end), a round in a
    later request than the one before it."""
    sent = [0] * len(rows)  # rounds of each row in earlier requests
    levels: list[list[int]] = [[] for _ in range(max(map(len, rows), default=0) + 1)]
    for row, bodies in enumerate(rows):  # rows by rounds left, in order
        levels[len(bodies)].append(row)
    top = len(levels) - 1
    while top > 0:
        request: list[bytes] = []
        taken: list[int] = []
        size = 0
        for left in range(top, 0, -1):
            waiting = levels[left]
            used = 0
            for row in waiting:
                body = rows[row][sent[row]]
                if len(request) == MAX_BATCH_ROWS or (request and size + len(body) > MAX_BATCH_BYTES):
                    break
                request.append(body)
                taken.append(row)
                size += len(body)
                used += 1
            levels[left] = waiting[used:]
            if used < len(waiting):
                break  # the request is full
        yield request
        for row in taken:
            sent[row] += 1
            if len(rows[row]) > sent[row]:
                levels[len(rows[row]) - sent[row]].append(row)
        while top > 0 and not levels[top]:
            top -= 1


def values_unchanged(values: Sequence[tuple[str, Any]], absent: Sequence[str] = ()) -> bytes:
    """An encoded column condition (a Filter): each column of ``values`` still has that newest
    value and each of ``absent`` is still missing. At most ``GUARD_COLUMNS`` comparisons (two
    for a missing column). The bytes the SDK's encoder gives the same condition
    (``values_unchanged_by_sdk``), encoded here (``variants_unchanged``)."""
    variants = []
    for name, value in values:
        if value is None:  # as the SDK: a comparison needs a value
            raise ValueError(f"column {name!r}: a condition compares with a value, not None")
        variants.append((name, encode_value(value)))  # bytes as BINARY, as the SDK's bytearray
    return variants_unchanged(variants, absent)


# Filter (table_store_filter.proto): type(1) { FT_SINGLE_COLUMN_VALUE = 1,
# FT_COMPOSITE_COLUMN_VALUE = 2 }, filter(2) its message's bytes. SingleColumnValueFilter:
# comparator(1), column_name(2), column_value(3) (vtype + payload), filter_if_missing(4),
# latest_version_only(5). CompositeColumnValueFilter: combinator(1) (LO_AND = 2),
# sub_filters(2)*, each a Filter.
_CT_EQUAL, _CT_NOT_EQUAL = b"\x08\x01", b"\x08\x02"
_ZERO = encode_value(0)  # what "missing" compares with (equal and unequal to it)
_MISSING_TAIL = b"\x1a" + varint(len(_ZERO)) + _ZERO + b"\x20\x00\x28\x01"  # passes if missing


def _single_filter(comparator: bytes, name: str, tail: bytes) -> bytes:
    raw = name.encode("utf-8")
    inner = b"".join((comparator, b"\x12", varint(len(raw)), raw, tail))
    return b"\x08\x01\x12" + varint(len(inner)) + inner


def variants_unchanged(values: Sequence[tuple[str, bytes]], absent: Sequence[str] = ()) -> bytes:
    """``values_unchanged`` of values given as their encoded ``vtype + payload`` (a cell's value
    as read, passed through: ``rowbytes.cell_variant``)."""
    if len(values) + 2 * len(absent) > GUARD_COLUMNS:
        raise ValueError(f"a condition holds at most {GUARD_COLUMNS} comparisons, "
                         f"got {len(values) + 2 * len(absent)}")
    # Equal to the value, failing where the column is missing, on its newest version.
    leaves = [_single_filter(_CT_EQUAL, name, b"".join((b"\x1a", varint(len(v)), v, b"\x20\x01\x28\x01")))
              for name, v in values]
    # "Missing": equal to a value and unequal to it, each passing where the column is missing
    # (the SDK's SingleColumnCondition takes no NOT_EXIST comparator).
    leaves += [_single_filter(comparator, name, _MISSING_TAIL)
               for name in absent for comparator in (_CT_EQUAL, _CT_NOT_EQUAL)]
    if not leaves:
        raise ValueError("a condition needs at least one comparison")
    if len(leaves) == 1:
        return leaves[0]
    parts = [b"\x08\x02"]  # combinator LO_AND
    for leaf in leaves:
        parts += (b"\x12", varint(len(leaf)), leaf)
    composite = b"".join(parts)
    return b"\x08\x02\x12" + varint(len(composite)) + composite


def values_unchanged_by_sdk(values: Sequence[tuple[str, Any]], absent: Sequence[str] = ()) -> bytes:
    """``values_unchanged`` built by the SDK (its condition objects and encoder): what the
    tests hold the encoding here to."""
    from tablestore import metadata as md
    from tablestore.protobuf import table_store_filter_pb2 as filter_pb2

    from tsmigrate.wire.rows import sdk_encoder

    leaves: list[md.ColumnCondition] = [
        md.SingleColumnCondition(name, bytearray(v) if isinstance(v, bytes) else v,
                                 md.ComparatorType.EQUAL, pass_if_missing=False,
                                 latest_version_only=True)
        for name, v in values]
    leaves += [md.SingleColumnCondition(name, 0, comparator, pass_if_missing=True)
               for name in absent
               for comparator in (md.ComparatorType.EQUAL, md.ComparatorType.NOT_EQUAL)]
    if len(leaves) > GUARD_COLUMNS:
        raise ValueError(f"a condition holds at most {GUARD_COLUMNS} comparisons, got {len(leaves)}")
    condition = leaves[0]
    if len(leaves) > 1:
        condition = md.CompositeColumnCondition(md.LogicalOperator.AND)
        for leaf in leaves:
            condition.add_sub_condition(leaf)
    proto = filter_pb2.Filter()
    sdk_encoder()._make_column_condition(proto, condition)
    return proto.SerializeToString()


def write_whole_rows(client: OTSClient, table: str,
                     puts: Sequence[tuple[Sequence[tuple[str, Any]], Sequence[tuple[bytes, int]], bytes]],
                     deletes: Sequence[tuple[Sequence[tuple[str, Any]], bytes]]) -> list[Any]:
    """For a table that takes no UpdateRow (``allow_update=False``): PutRow of whole rows
    (key, every cell as read or merged: (cell bytes, checksum), each with its timestamp) and
    DeleteRow of keys, each under its condition (``row_condition``). Returns the keys whose
    condition did not hold (the row changed since it was read): nothing was written for them."""
    refused: list[Any] = []
    if puts:
        encoded = []
        for key, cells, _ in puts:
            pk_cells, crcs = key_cells(key)
            encoded.append(HEADER + assemble_row(pk_cells, crcs, cells))
        positions = BatchWriter(client, table).write_guarded(pb.PUT, encoded, [c for *_, c in puts])
        refused += [puts[i][0] for i in positions]
    if deletes:
        positions = BatchWriter(client, table).write_guarded(
            pb.DELETE, [encode_delete(key) for key, _ in deletes], [c for _, c in deletes])
        refused += [deletes[i][0] for i in positions]
    return refused


def write_rows(client: OTSClient, table: str, rows: Sequence[TargetRow]) -> None:
    """Put whole target rows (every version with its timestamp); for change capture."""
    BatchWriter(client, table).put([RowTransform.encode(row)[0] for row in rows])


def delete_keys(client: OTSClient, table: str, keys: Sequence[Sequence[tuple[str, Any]]]) -> None:
    """Delete target rows by key; for change capture."""
    BatchWriter(client, table).delete([encode_delete(key) for key in keys])
