"""PUT rows with a timestamp in every cell, parsed by the SDK's native parser (`nativerow`): what is
stored, and every error, is what the other paths (`fastrow`, `plainbuffer.decode_row`) give.

Each request is sent twice, to two tables: with the native path, and with it switched off (today's
paths alone); responses, errors and stored rows must be equal, byte for byte."""

from __future__ import annotations

import itertools
import math
import struct
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rawhttp import call
from tablestore import CapacityUnit, OTSClient, OTSServiceError, ReservedThroughput, TableMeta, TableOptions
from tablestore.native import parse_single_row
from tablestore.plainbuffer.plain_buffer_builder import PlainBufferBuilder
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local import fastrow, keycodec, nativerow, rowdata
from tsmigrate.local.storage import StoredRow
from tsmigrate.local.testing import LocalTablestore
from tsmigrate.wire.plainbuffer import (
    AUTO_INCREMENT,
    HEADER,
    INF_MIN,
    assemble_row,
    crc8_bytes,
    encode_cell,
    encode_primary_key_cells,
    encode_row,
)

pytestmark = pytest.mark.skipif(not nativerow.NATIVE_AVAILABLE, reason="the SDK has no native parser")

CU0 = ReservedThroughput(CapacityUnit(0, 0))
T0 = int(time.time() * 1000) - 60_000
PK = [("k", "x"), ("n", 1)]
CELLS = [("a", 7, T0), ("b", "text", T0 + 1), ("c", True, T0 + 2)]
IGNORE = pb.Condition(row_existence=pb.IGNORE)
_tables = itertools.count()


def _cell(name: bytes, value: bytes | None, ts: int | None = None, op: int | None = None, *,
          size: int | None = None, crc_over: bytes | None = None, op_first: bool = False,
          ) -> tuple[bytes, int]:
    """A cell built by hand: `value` is `vtype + payload`; `size` its len32 when not the true one;
    `crc_over` the value bytes the checksum covers, when not `value`; `op_first`: the checksum
    covers the op before the timestamp (the native parser's order, not the service's)."""
    crc = crc8_bytes(0, name)
    out = b"\x03\x04" + struct.pack("<i", len(name)) + name
    if value is not None:
        out += b"\x05" + struct.pack("<i", len(value) if size is None else size) + value
        crc = crc8_bytes(crc, value if crc_over is None else crc_over)
    stamp = b"" if ts is None else struct.pack("<q", ts)
    if op is not None:
        out += bytes((0x06, op))
    out += b"" if ts is None else b"\x07" + stamp
    opcode = b"" if op is None else bytes((op,))
    crc = crc8_bytes(crc, opcode + stamp if op_first else stamp + opcode)
    return out + bytes((0x0A, crc)), crc


def _row(pk: list[tuple[str, object]], cells: list[tuple[bytes, int]], delete_marker: bool = False) -> bytes:
    pk_bytes, pk_crcs = encode_primary_key_cells(pk)
    return HEADER + assemble_row(pk_bytes, pk_crcs, cells, delete_marker)


def _good_cells() -> list[tuple[bytes, int]]:
    return [encode_cell(*c) for c in CELLS]


def _key_cell_with(size: int | None = None, ts: int | None = None) -> bytes:
    """The row with its key's string cell built by hand."""
    k, crc_k = _cell(b"k", b"\x03" + struct.pack("<i", 1) + b"x", ts, size=size)
    n, crc_n = encode_cell("n", 1)
    return HEADER + assemble_row(k + n, [crc_k, crc_n], _good_cells())


def _with_cell(index: int, cell: tuple[bytes, int]) -> bytes:
    cells = _good_cells()
    cells[index] = cell
    return _row(PK, cells)


def _flip(data: bytes, find: bytes, offset: int = 1) -> bytes:
    bad = bytearray(data)
    bad[data.index(find) + offset] ^= 0x04
    return bytes(bad)


GOOD = encode_row(PK, CELLS)
STRING = b"\x03" + struct.pack("<i", 4) + b"text"
SEVEN = b"\x00" + struct.pack("<q", 7)
def _order_matters(name: bytes, value: bytes, op: int) -> int:
    """A timestamp near T0 whose cell checksum differs between the two orders of op and
    timestamp: at T0 itself, one run in about 256 would find them equal (CRC-8), and the cell
    would then pass as the service's."""
    ts = T0
    while _cell(name, value, ts, op, op_first=True) == _cell(name, value, ts, op):
        ts -= 1
    return ts


# Rows the native parser accepts that `nativerow` must not take: the service's rules refuse them,
# or they are not sent as stored (fastrow takes those).
NATIVE_ACCEPTS: dict[str, bytes] = {
    "size prefix of a string": _with_cell(1, _cell(b"b", STRING, T0 + 1, size=len(STRING) + 1)),
    "size prefix of an integer": _with_cell(0, _cell(b"a", SEVEN, T0, size=10)),
    "size prefix of a key": _key_cell_with(size=7),
    "boolean byte 2, checksum over 1": _with_cell(2, _cell(b"c", b"\x02\x02", T0 + 2, crc_over=b"\x02\x01")),
    "NUL in a name": _with_cell(0, _cell(b"a\x00z", SEVEN, T0)),
    "cell op, native checksum order": _with_cell(0, _cell(b"a", SEVEN, _order_matters(b"a", SEVEN, 3),
                                                          3, op_first=True)),
    "delete marker": _row(PK, _good_cells(), delete_marker=True),
    "trailing byte": GOOD + b"\x00",
    "trailing row": GOOD + GOOD[4:],
    "empty name": encode_row(PK, [("", 1, T0), *CELLS]),
}
NATIVE_REFUSES: dict[str, bytes] = {
    "checksum of a key": _flip(GOOD, b"x", 0),
    "checksum of a name": _flip(GOOD, b"b\x05"),
    "checksum of a value": _flip(GOOD, b"text"),
    "checksum of a timestamp": _flip(GOOD, struct.pack("<q", T0 + 1)),
    "row checksum": GOOD[:-1] + bytes((GOOD[-1] ^ 1,)),
    "boolean byte 2, checksum over 2": _with_cell(2, _cell(b"c", b"\x02\x02", T0 + 2)),
    "cell op, service checksum order": _with_cell(0, _cell(b"a", SEVEN, T0, 3)),
    "cell op without value or timestamp": _with_cell(1, _cell(b"b", None, None, 1)),
    "key with a timestamp": _key_cell_with(ts=T0),
    "INF_MIN in the key": encode_row([("k", "x"), ("n", INF_MIN)], CELLS),
    "auto-increment placeholder": encode_row([("k", "x"), ("n", AUTO_INCREMENT)], CELLS),
    "truncated": GOOD[:-3],
    "a cell without timestamp": encode_row(PK, [("a", 7), *CELLS[1:]]),
}
# Rows the native path takes: the checks after parsing (put_one's) decide.
NATIVE_TAKES: dict[str, bytes] = {
    "good": GOOD,
    "every type, non-ASCII": encode_row([("k", "\u00e9t\u00e9"), ("n", -5)], [
        ("a", -(1 << 63), T0), ("b", "\U0001f600 caf\u00e9", T0 + 1), ("c", False, T0), ("d", 2.5, T0 + 2),
        ("e", bytearray(b"\x00\xff\x09"), T0), ("f", "", T0)]),
    "timestamp 0": encode_row(PK, [("a", 7, 0)]),
    "timestamp in the future": encode_row(PK, [("a", 7, T0 + 10 * 86400_000)]),
    "timestamp past INT64_MAX/1000": encode_row(PK, [("a", 7, (1 << 62))]),
    "negative timestamp": encode_row(PK, [("a", 7, -1)]),
    "too many columns": encode_row(PK, [(f"c{i:04d}", i, T0) for i in range(1025)]),
    "a value too long": encode_row(PK, [("a", "v" * (2 * 1024 * 1024 + 1), T0)]),
    "NaN": encode_row(PK, [("a", math.nan, T0)]),
    "infinity": encode_row(PK, [("a", -math.inf, T0)]),
    "a name of the key": encode_row(PK, [("k", 1, T0)]),
    "an invalid name": encode_row(PK, [("1a", 1, T0)]),
    # Not stored as sent (no `latest`): put_one sorts the names, or keeps the versions.
    "versions of a column": encode_row(
        PK, [("a", 8, T0 + 1), CELLS[0], CELLS[1], ("b", "old", T0 - 5), CELLS[2]]),
    "repeated timestamp": encode_row(PK, [CELLS[0], ("a", 8, T0), CELLS[2]]),
    "unsorted names": encode_row(PK, [CELLS[1], CELLS[0], CELLS[2]]),
}
# The rows above stored as sent: a `latest` of the request's row.
AS_SENT = {"good", "every type, non-ASCII", "timestamp 0", "timestamp in the future",
           "timestamp past INT64_MAX/1000", "negative timestamp", "too many columns", "a value too long",
           "NaN", "infinity", "a name of the key", "an invalid name"}


def _create(client: OTSClient, name: str) -> None:
    client.create_table(TableMeta(name, [("k", "STRING"), ("n", "INTEGER")]),
                        TableOptions(max_version=3, max_time_deviation=86400), CU0)


def _stored(ots: LocalTablestore, table: str) -> list[tuple[Any, ...]]:
    storage = ots.server.storage
    info = storage.table(ots.instance, table)
    assert info is not None
    with storage.lock:
        rows: list[StoredRow] = storage.scan(info.table_id, b"", b"\xff", True, 1000)
    return [(r.key, r.pk, r.pkc, r.latest, r.mints, r.blob, r.lsize) for r in rows]


def _batch(table: str, rows: list[bytes]) -> pb.BatchWriteRowRequest:
    items = [pb.RowInBatchWriteRowRequest(type=pb.PUT, row_change=row, condition=IGNORE) for row in rows]
    return pb.BatchWriteRowRequest(tables=[pb.TableInBatchWriteRowRequest(table_name=table, rows=items)])


def _outcome(client: OTSClient, api: str, table: str, data: bytes) -> object:
    """What the server answers to `data` alone (PutRow), or among good rows (BatchWriteRow: as
    many as check their values together, the bad one in the middle)."""
    try:
        if api == "PutRow":
            request = pb.PutRowRequest(table_name=table, row=data, condition=IGNORE)
            return call(client, api, request, pb.PutRowResponse).SerializeToString()
        good = [encode_row([("k", f"g{i:02d}"), ("n", 1)], CELLS) for i in range(fastrow.CHECK_TOGETHER)]
        rows = [*good[:8], data, *good[8:]]
        response = call(client, api, _batch(table, rows), pb.BatchWriteRowResponse)
        return [r.SerializePartialToString() for r in response.tables[0].rows]
    except OTSServiceError as e:
        return e.code, e.message


def _both_ways(ots: LocalTablestore, monkeypatch: pytest.MonkeyPatch, data: bytes,
               apis: tuple[str, ...] = ("PutRow", "BatchWriteRow"), stored: bool = True) -> list[object]:
    """The outcome of each api with the native path and without, asserted equal, with what
    each stored (`stored`) or how many rows."""
    client = ots.client()
    outcomes = []
    for api in apis:
        seen = []
        for native in (True, False):
            table = f"t{next(_tables)}"
            _create(client, table)
            monkeypatch.setattr(nativerow, "NATIVE_AVAILABLE", native)
            outcome = _outcome(client, api, table, data)
            rows = _stored(ots, table)
            seen.append((outcome, rows if stored else len(rows)))
        monkeypatch.undo()
        assert seen[0] == seen[1], api
        outcomes.append(seen[0][0])
    return outcomes


def _native_parses(data: bytes) -> bool:
    try:
        parse_single_row(data)
    except (ValueError, SystemError):
        return False
    return True


def _error_message(outcome: object) -> str:
    """The error of a PutRow outcome, or '' when it succeeded."""
    return outcome[1] if isinstance(outcome, tuple) else ""  # type: ignore[return-value]


@pytest.mark.parametrize("case", sorted(NATIVE_ACCEPTS))
def test_what_the_native_parser_accepts_but_the_rules_refuse_takes_the_old_path(
    ots_instance: LocalTablestore, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    data = NATIVE_ACCEPTS[case]
    assert _native_parses(data)  # the case reaches the checks after the native parse
    assert nativerow.parse_put_row(data) is None
    put, _ = _both_ways(ots_instance, monkeypatch, data)
    expected = {"NUL in a name": "Invalid column name", "delete marker": "Delete marker is not allowed",
                "trailing byte": "after the row", "trailing row": "after the row",
                "cell op, native checksum order": "checksum mismatch", "empty name": "Invalid column name",
                "size prefix of an integer": "Cell data broken"}
    if case in expected:
        assert expected[case] in _error_message(put)


@pytest.mark.parametrize("case", sorted(NATIVE_REFUSES))
def test_what_the_native_parser_refuses_takes_the_old_path(
    ots_instance: LocalTablestore, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    data = NATIVE_REFUSES[case]
    assert nativerow.parse_put_row(data) is None
    # The server stamps a cell sent without timestamp: the rows stored differ by that.
    put, _ = _both_ways(ots_instance, monkeypatch, data, stored=case != "a cell without timestamp")
    if case.startswith("checksum") or case == "row checksum":
        assert "checksum" in _error_message(put).lower()
    elif case.startswith("cell op"):
        assert "OpType cannot be given" in _error_message(put)


@pytest.mark.parametrize("case", sorted(NATIVE_TAKES))
def test_rows_the_native_path_takes_store_and_fail_as_before(
    ots_instance: LocalTablestore, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    data = NATIVE_TAKES[case]
    taken = nativerow.parse_put_row(data)
    assert taken is not None and (taken[7] == data[4:] if case in AS_SENT else taken[7] is None)
    apis = ("PutRow",) if case == "a value too long" else ("PutRow", "BatchWriteRow")
    put = _both_ways(ots_instance, monkeypatch, data, apis)[0]
    expected = {"timestamp 0": "Invalid timestamp. Cell:a.", "timestamp in the future": "Invalid timestamp",
                "timestamp past INT64_MAX/1000": "Timestamp must be in range",
                "negative timestamp": "Timestamp must be in range",
                "too many columns": "column count: 1025", "a value too long": "exceeds the MaxLength",
                "NaN": "NaN can't be set", "infinity": "Infinity can't be set",
                "a name of the key": "Duplicated attribute column name with primary key",
                "an invalid name": "Invalid column name"}
    assert (expected[case] in _error_message(put)) if case in expected else _error_message(put) == ""


@pytest.mark.parametrize("how", ["condition", "return", "stream"])
def test_a_conditional_returning_or_streamed_put_stores_the_same(
    ots_instance: LocalTablestore, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The paths past the plain put: a condition, a row returned, mutation hooks (a stream)."""
    data = NATIVE_TAKES["every type, non-ASCII"]
    client = ots_instance.client()
    seen = []
    for native in (True, False):
        table = f"t{next(_tables)}"
        _create(client, table)
        if how == "stream":
            spec = pb.StreamSpecification(enable_stream=True, expiration_time=24)
            call(client, "UpdateTable", pb.UpdateTableRequest(table_name=table, stream_spec=spec),
                 pb.UpdateTableResponse)
        monkeypatch.setattr(nativerow, "NATIVE_AVAILABLE", native)
        request = pb.PutRowRequest(table_name=table, row=data, condition=IGNORE)
        if how == "condition":
            request.condition.row_existence = pb.EXPECT_NOT_EXIST
        elif how == "return":
            request.return_content.return_type = pb.RT_PK
        response = call(client, "PutRow", request, pb.PutRowResponse)
        seen.append((response.SerializeToString(), _stored(ots_instance, table)))
    assert seen[0] == seen[1] and len(seen[0][1]) == 1
    assert seen[0][1][0][3] == data[4:]  # stored as sent (with hooks: re-assembled from its cells)


def test_a_rewrite_batch_stores_what_the_old_path_stored(
    ots_instance: LocalTablestore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 rows as the rewrite sends them (the SDK's writer), each stored byte-equal either way,
    and read back."""
    rows = [bytes(PlainBufferBuilder.serialize_for_put_row(
        [("k", f"keyword {i % 17:05d}"), ("n", i)],
        [("credits", i % 7, T0), ("payload", f"response {i:012d} " + "lorem ipsum " * 8, T0 + i),
         ("status", "ok" if i % 10 else "failed", T0)])) for i in range(200)]
    assert all(nativerow.parse_put_row(row) is not None for row in rows)
    client = ots_instance.client()
    stored = []
    for native, table in ((True, "native"), (False, "old")):
        _create(client, table)
        monkeypatch.setattr(nativerow, "NATIVE_AVAILABLE", native)
        response = call(client, "BatchWriteRow", _batch(table, rows), pb.BatchWriteRowResponse)
        assert all(r.is_ok for r in response.tables[0].rows)
        stored.append(_stored(ots_instance, table))
    assert len(stored[0]) == 200 and stored[0] == stored[1]
    assert sorted(row[3] for row in stored[0]) == sorted(row[4:] for row in rows)  # the rows as sent


# -- the new path against the old, in process ----------------------------------------------------

NAMES = st.one_of(st.text("abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=8),
                  st.text(min_size=1, max_size=6), st.sampled_from(["a", "b", "c"]))
VALUES = st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), st.floats(), st.booleans(),
                   st.text(max_size=80), st.binary(max_size=80).map(bytearray))
KEY_VALUES = st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), st.text(max_size=40),
                       st.binary(max_size=40).map(bytearray))
TIMESTAMPS = st.integers(-(1 << 63), (1 << 63) - 1)


def _same(a: object, b: object) -> bool:
    """Equality that tells floats by their bits (NaN too) and values by their type."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)  # type: ignore[arg-type]
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    return a == b


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(NAMES, KEY_VALUES), min_size=1, max_size=4),
       st.lists(st.tuples(NAMES, VALUES, st.one_of(TIMESTAMPS, st.none())), min_size=1, max_size=8),
       st.sampled_from([lambda cells: sorted(cells, key=lambda cell: cell[0]), lambda cells: cells]),
       st.booleans())
def test_the_native_path_gives_what_fastrow_gives(
    pk: list[tuple[str, object]], cells: list[tuple[str, object, int | None]],
    order: Callable[[list[Any]], list[Any]], stamped: bool,
) -> None:
    """Random rows (timestamps in every cell, or not; names sorted, or as drawn, repeated too):
    whenever the native path takes one, it is exactly what fastrow reads, and stored the same; it
    takes every row with a timestamp in each cell, and stores it as sent when its names are
    strictly increasing."""
    cells = order([(n, v, ts if ts is not None or not stamped else 0) for n, v, ts in cells])
    data = encode_row(pk, [(n, v) if ts is None else (n, v, ts) for n, v, ts in cells])
    new = nativerow.parse_put_row(data)
    names = [n for n, _, _ in cells]
    taken = (all(ts is not None for _, _, ts in cells)
             and not any("\x00" in n for n in [*names, *(n for n, _ in pk)]))  # C-string names
    assert (new is not None) == taken
    if new is None:
        return
    in_order = all(a < b for a, b in itertools.pairwise(names))
    assert new[7] == (data[4:] if in_order else None)
    old = fastrow.parse_put_row(data, T0)
    assert old is not None and old[7] is None
    assert _same(list(new[:7]), list(old[:7]))
    if len(set(names)) == len(names):  # a lean row (put_one keeps the versions of the others)
        key = keycodec.encode_key([v for _, v in new[2]])
        stored = rowdata.make_lean_row(key, new[0], new[1], new[3], new[4], new[7])
        assert stored == rowdata.make_lean_row(key, old[0], old[1], old[3], old[4])
