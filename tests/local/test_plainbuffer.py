"""PlainBuffer codec, cross-checked byte for byte against the official SDK's writer and readers."""

from __future__ import annotations

import copy
import logging
import pickle
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tablestore.metadata import INF_MAX as SDK_INF_MAX
from tablestore.metadata import INF_MIN as SDK_INF_MIN
from tablestore.metadata import PK_AUTO_INCR as SDK_PK_AUTO_INCR
from tablestore.plainbuffer.plain_buffer_builder import PlainBufferBuilder
from tablestore.plainbuffer.plain_buffer_coded_stream import PlainBufferCodedInputStream
from tablestore.plainbuffer.plain_buffer_crc8 import CRC8_TABLE, PlainBufferCrc8
from tablestore.plainbuffer.plain_buffer_stream import PlainBufferInputStream

from tsmigrate.wire import plainbuffer as pb
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
)

# Importing tablestore.native logs nothing, but the SDK's decoder module logs at import.
logging.getLogger("tablestore").setLevel(logging.ERROR)
try:
    from tablestore.native import NATIVE_AVAILABLE
    from tablestore.native import parse_multiple_rows as native_rows
    from tablestore.native import parse_single_row as native_row
except ImportError:  # pragma: no cover - depends on the platform wheel
    NATIVE_AVAILABLE = False

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
TIMESTAMPS = st.one_of(st.none(), INT64)
# Tablestore names are ASCII; the SDK writes len(str) as the byte length, so only ASCII
# names survive its writer.
SDK_NAMES = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_",
                    min_size=1, max_size=20)
NAMES = st.text(min_size=1, max_size=20)
ATTR_VALUES = st.one_of(INT64, st.floats(allow_nan=False), st.booleans(),
                        st.text(max_size=40), st.binary(max_size=40))
PK_VALUES = st.one_of(INT64, st.text(max_size=40), st.binary(max_size=40))


def same(a: object, b: object) -> bool:
    """Equality that tells -0.0 from 0.0, True from 1 and bytes from str."""
    if isinstance(a, bytearray | bytes) and isinstance(b, bytearray | bytes):
        return bytes(a) == bytes(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(  # type: ignore[arg-type]
            same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def to_sdk(value: object) -> object:
    """The SDK's spelling of a value: BLOB is bytearray (it sends bytes as STRING)."""
    if isinstance(value, bytes):
        return bytearray(value)
    return {id(INF_MIN): SDK_INF_MIN, id(INF_MAX): SDK_INF_MAX,
            id(AUTO_INCREMENT): SDK_PK_AUTO_INCR}.get(id(value), value)


def sdk_read_row(data: bytes) -> tuple[list, list]:
    return PlainBufferCodedInputStream(PlainBufferInputStream(data)).read_row()


def sdk_read_rows(data: bytes) -> list:
    return PlainBufferCodedInputStream(PlainBufferInputStream(data)).read_rows()


def unique_names(draw: st.DrawFn, names: st.SearchStrategy[str], n: int) -> list[str]:
    return draw(st.lists(names, min_size=n, max_size=n, unique=True))


@st.composite
def rows(draw: st.DrawFn, names: st.SearchStrategy[str] = SDK_NAMES) -> tuple[list, list]:
    n_pk = draw(st.integers(1, 4))
    n_cells = draw(st.integers(0, 6))
    all_names = unique_names(draw, names, n_pk + n_cells)
    pk = [(name, draw(PK_VALUES)) for name in all_names[:n_pk]]
    cells = [(name, draw(ATTR_VALUES), draw(TIMESTAMPS)) for name in all_names[n_pk:]]
    return pk, cells


SAMPLE_PK = [("uid", "u-1"), ("seq", 7)]
SAMPLE_CELLS = [("name", "Ann", 1000), ("age", 42, 1001), ("score", 1.5, None),
                ("ok", True, 5), ("raw", b"\x00\xff", 6)]
SAMPLE = pb.encode_row(SAMPLE_PK, SAMPLE_CELLS)


# --- CRC -------------------------------------------------------------------------------------


def test_crc_table_matches_sdk() -> None:
    assert [pb.crc8_bytes(0, bytes([i])) for i in range(256)] == CRC8_TABLE


@SETTINGS
@given(st.integers(0, 255), st.binary(max_size=3000))
def test_crc8_bytes_matches_sdk(crc: int, data: bytes) -> None:
    # Sizes straddle the 160-byte switch to the folding implementation.
    assert pb.crc8_bytes(crc, data) == PlainBufferCrc8.crc_bytes(crc, data)
    assert pb.crc8_bytes(crc, bytearray(data)) == pb.crc8_bytes(crc, memoryview(data))


@pytest.mark.parametrize("size", [159, 160, 161, 254, 255, 1024, 127 * 9, 70_001])
def test_crc8_long_inputs(size: int) -> None:
    data = random.Random(size).randbytes(size)
    assert pb.crc8_bytes(0x5A, data) == PlainBufferCrc8.crc_bytes(0x5A, data)


# --- encoder == SDK writer, byte for byte ------------------------------------------------------


@SETTINGS
@given(rows())
def test_encode_row_equals_sdk_put_row(row: tuple[list, list]) -> None:
    pk, cells = row
    sdk_cells = [(n, to_sdk(v), ts) if ts is not None else (n, to_sdk(v)) for n, v, ts in cells]
    expected = PlainBufferBuilder.serialize_for_put_row(
        [(n, to_sdk(v)) for n, v in pk], sdk_cells)
    assert pb.encode_row(pk, cells) == bytes(expected)


@SETTINGS
@given(st.lists(st.tuples(SDK_NAMES, st.one_of(PK_VALUES, st.sampled_from(
    [INF_MIN, INF_MAX, AUTO_INCREMENT]))), min_size=1, max_size=4))
def test_encode_primary_key_equals_sdk(pk: list) -> None:
    expected = PlainBufferBuilder.serialize_primary_key([(n, to_sdk(v)) for n, v in pk])
    assert pb.encode_primary_key(pk) == bytes(expected)
    assert pb.decode_primary_key(bytes(expected)) == pk


@SETTINGS
@given(ATTR_VALUES)
def test_encode_value_equals_sdk(value: object) -> None:
    assert pb.encode_value(value) == bytes(PlainBufferBuilder.serialize_column_value(
        to_sdk(value)))


def test_delete_marker_row_equals_sdk_delete_row() -> None:
    pk_bytes, crcs = pb.encode_primary_key_cells(SAMPLE_PK)
    ours = HEADER + pb.assemble_row(pk_bytes, crcs, [], delete_marker=True)
    assert ours == bytes(PlainBufferBuilder.serialize_for_delete_row(SAMPLE_PK))


# --- decoder reads what the SDK writes -------------------------------------------------------


@SETTINGS
@given(rows())
def test_decode_sdk_put_row(row: tuple[list, list]) -> None:
    pk, cells = row
    data = PlainBufferBuilder.serialize_for_put_row(
        [(n, to_sdk(v)) for n, v in pk], [(n, to_sdk(v), ts) for n, v, ts in cells])
    decoded = pb.decode_row(bytes(data))
    assert same(decoded.primary_key, pk)
    assert [c.name for c in decoded.cells] == [n for n, _, _ in cells]
    for cell, (_, value, ts) in zip(decoded.cells, cells, strict=True):
        assert same(cell.value, value)
        assert (cell.op, cell.timestamp) == (None, ts)
    assert decoded.delete_marker is False


def test_sdk_sends_bytes_as_string() -> None:
    data = PlainBufferBuilder.serialize_for_put_row([("k", b"abc")], [("c", b"xyz")])
    assert pb.decode_row(bytes(data)) == Row([("k", "abc")], [Cell("c", "xyz", None, None)],
                                             False)


@SETTINGS
@given(st.data())
def test_decode_sdk_update_row(data: st.DataObject) -> None:
    names = unique_names(data.draw, SDK_NAMES, 6)
    put_value, put_ts = data.draw(ATTR_VALUES), data.draw(TIMESTAMPS)
    del_ts, incr = data.draw(INT64), data.draw(INT64)
    put = (names[1], to_sdk(put_value)) if put_ts is None else (
        names[1], to_sdk(put_value), put_ts)
    columns = {
        "put": [put],
        "delete": [(names[2], None, del_ts), names[3]],
        "delete_all": [names[4]],
        "increment": [(names[5], incr)],
    }
    raw = PlainBufferBuilder.serialize_for_update_row([(names[0], 1)], columns)
    row = pb.decode_row(bytes(raw))
    assert row.primary_key == [(names[0], 1)]
    assert same(row.cells[0].value, put_value)
    assert row.cells[1:] == [
        Cell(names[2], None, OP_DELETE_ONE, del_ts),
        Cell(names[3], None, OP_DELETE_ONE, None),
        Cell(names[4], None, OP_DELETE_ALL, None),
        Cell(names[5], incr, OP_INCREMENT, None),
    ]
    assert (row.cells[0].op, row.cells[0].timestamp) == (None, put_ts)


def test_decode_sdk_delete_row() -> None:
    data = bytes(PlainBufferBuilder.serialize_for_delete_row(SAMPLE_PK))
    assert pb.decode_row(data) == Row(SAMPLE_PK, [], True)


def test_decode_sdk_range_bounds() -> None:
    data = PlainBufferBuilder.serialize_primary_key(
        [("a", SDK_INF_MIN), ("b", SDK_INF_MAX), ("c", SDK_PK_AUTO_INCR), ("d", 3)])
    assert pb.decode_primary_key(bytes(data)) == [
        ("a", INF_MIN), ("b", INF_MAX), ("c", AUTO_INCREMENT), ("d", 3)]


@SETTINGS
@given(ATTR_VALUES)
def test_decode_sdk_filter_value(value: object) -> None:
    raw = bytes(PlainBufferBuilder.serialize_column_value(to_sdk(value)))
    assert same(pb.decode_value(raw), value)


# --- SDK readers read what we write (GetRow / GetRange responses) ------------------------------


def expected_sdk_row(pk: list, cells: list) -> tuple[list, list]:
    return ([(n, to_sdk(v)) for n, v in pk], [(n, to_sdk(v), ts) for n, v, ts in cells])


@SETTINGS
@given(rows())
def test_sdk_python_reader_reads_our_row(row: tuple[list, list]) -> None:
    pk, cells = row
    got_pk, got_cells = sdk_read_row(pb.encode_row(pk, cells))
    want_pk, want_cells = expected_sdk_row(pk, cells)
    assert same(got_pk, want_pk)
    assert same(got_cells, want_cells)


@SETTINGS
@given(st.lists(rows(), max_size=4))
@pytest.mark.slow
def test_sdk_python_reader_reads_our_rows(batch: list) -> None:
    encoded = [pb.assemble_row(*pb.encode_primary_key_cells(pk),
                               [pb.encode_cell(*c) for c in cells]) for pk, cells in batch]
    data = pb.join_rows(encoded)
    if not batch:
        assert data == b""
        return
    got = sdk_read_rows(data)
    assert len(got) == len(batch)
    for sdk_row, (pk, cells) in zip(got, batch, strict=True):
        want_pk, want_cells = expected_sdk_row(pk, cells)
        assert same(sdk_row.primary_key, want_pk)
        assert same(sdk_row.attribute_columns, want_cells)


def test_sdk_python_reader_reads_our_primary_key() -> None:
    assert sdk_read_row(pb.encode_primary_key(SAMPLE_PK)) == (SAMPLE_PK, [])


needs_native = pytest.mark.skipif(not NATIVE_AVAILABLE,
                                  reason="tablestore.native C parser not available")


@needs_native
@SETTINGS
@given(st.lists(rows(), min_size=1, max_size=4))
def test_sdk_native_parser_reads_our_rows(batch: list) -> None:
    encoded = [pb.encode_row(pk, cells) for pk, cells in batch]
    for data, (pk, cells) in zip(encoded, batch, strict=True):
        got_pk, got_cells = native_row(data)
        want_pk, want_cells = expected_sdk_row(pk, cells)
        assert same(got_pk, want_pk)
        # The C parser omits the timestamp element when there is none.
        assert same(got_cells, [c if c[2] is not None else c[:2] for c in want_cells])
    multi = native_rows(pb.join_rows(d[len(HEADER):] for d in encoded))
    assert len(multi) == len(batch)


@needs_native
def test_sdk_native_parser_reads_our_primary_key() -> None:
    assert native_row(pb.encode_primary_key(SAMPLE_PK)) == (SAMPLE_PK, [])


# --- our own round trips ---------------------------------------------------------------------


@SETTINGS
@given(st.one_of(ATTR_VALUES, st.none(), st.sampled_from([INF_MIN, INF_MAX, AUTO_INCREMENT])))
def test_value_round_trip(value: object) -> None:
    assert same(pb.decode_value(pb.encode_value(value)), value)


@SETTINGS
@given(rows(NAMES))
def test_row_round_trip_with_unicode_names(row: tuple[list, list]) -> None:
    pk, cells = row
    decoded = pb.decode_row(pb.encode_row(pk, cells))
    assert same(decoded.primary_key, pk)
    assert [(c.name, c.op, c.timestamp) for c in decoded.cells] == [
        (n, None, ts) for n, _, ts in cells]
    assert all(same(c.value, v) for c, (_, v, _) in zip(decoded.cells, cells, strict=True))


def test_decode_rows() -> None:
    assert pb.decode_rows(b"") == []
    second = pb.encode_primary_key([("uid", "u-2"), ("seq", 8)])
    rows_ = pb.decode_rows(pb.join_rows([SAMPLE[4:], second[4:]]))
    assert [r.primary_key for r in rows_] == [SAMPLE_PK, [("uid", "u-2"), ("seq", 8)]]


def test_encode_cell_is_a_whole_cell() -> None:
    cell, crc = pb.encode_cell("c", 5, 77)
    assert cell[0] == pb.TAG_CELL and cell[-2:] == bytes((pb.TAG_CELL_CHECKSUM, crc))
    row = pb.decode_row(HEADER + pb.assemble_row(*pb.encode_primary_key_cells([("k", 1)]),
                                                 [(cell, crc)]))
    assert row.cells == [Cell("c", 5, None, 77)]


def test_value_subclasses_and_buffers() -> None:
    import enum

    class Num(enum.IntEnum):
        ONE = 1

    assert pb.encode_value(Num.ONE) == pb.encode_value(1)
    assert pb.encode_value(bytearray(b"ab")) == pb.encode_value(b"ab")
    assert pb.encode_value(memoryview(b"ab")) == pb.encode_value(b"ab")


def test_sentinels() -> None:
    assert repr(INF_MIN) == "INF_MIN" and repr(AUTO_INCREMENT) == "AUTO_INCREMENT"
    for s in (INF_MIN, INF_MAX, AUTO_INCREMENT):
        assert pickle.loads(pickle.dumps(s)) is s
        assert copy.deepcopy(s) is s


# --- errors ----------------------------------------------------------------------------------


def flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0xFF]) + data[index + 1:]


def test_bad_header() -> None:
    with pytest.raises(PlainBufferError, match="header"):
        pb.decode_row(b"\x76\x00\x00\x00" + SAMPLE[4:])


def test_flipped_value_byte_names_the_cell() -> None:
    index = SAMPLE.index(b"Ann")
    with pytest.raises(PlainBufferError, match="checksum mismatch at cell 'name'"):
        pb.decode_row(flip(SAMPLE, index))


def test_flipped_timestamp_byte_names_the_cell() -> None:
    index = SAMPLE.index(struct.pack("<q", 1001))
    with pytest.raises(PlainBufferError, match="checksum mismatch at cell 'age'"):
        pb.decode_row(flip(SAMPLE, index))


def test_flipped_cell_checksum() -> None:
    cell, _ = pb.encode_cell("seq", 7)
    index = SAMPLE.index(cell) + len(cell) - 1
    with pytest.raises(PlainBufferError, match="checksum mismatch at cell 'seq'"):
        pb.decode_row(flip(SAMPLE, index))


def test_flipped_row_checksum() -> None:
    with pytest.raises(PlainBufferError, match="row checksum mismatch"):
        pb.decode_row(flip(SAMPLE, len(SAMPLE) - 1))


def test_flipped_op_byte() -> None:
    data = bytes(PlainBufferBuilder.serialize_for_update_row(
        [("k", 1)], {"delete_all": ["gone"]}))
    index = data.index(bytes((pb.TAG_CELL_TYPE, OP_DELETE_ALL))) + 1
    bad = data[:index] + bytes((OP_INCREMENT,)) + data[index + 1:]
    with pytest.raises(PlainBufferError, match="checksum mismatch at cell 'gone'"):
        pb.decode_row(bad)
    with pytest.raises(PlainBufferError, match="unknown cell op type 9"):
        pb.decode_row(data[:index] + b"\x09" + data[index + 1:])


def test_every_truncation_is_reported() -> None:
    for end in range(len(SAMPLE)):
        with pytest.raises(PlainBufferError):
            pb.decode_row(SAMPLE[:end])
    with pytest.raises(PlainBufferError, match="truncated"):
        pb.decode_row(SAMPLE[:-1])
    with pytest.raises(PlainBufferError, match="truncated"):
        pb.decode_row(SAMPLE[:20])


def test_unknown_value_type() -> None:
    with pytest.raises(PlainBufferError, match="unknown variant type 0x05"):
        pb.decode_value(b"\x05")


def test_unknown_tag() -> None:
    data = SAMPLE[:4] + b"\x0c" + SAMPLE[5:]
    with pytest.raises(PlainBufferError, match=r"mismatch tag, actual tag\(0x0c\)"):
        pb.decode_row(data)


def test_trailing_data() -> None:
    with pytest.raises(PlainBufferError, match="more data"):
        pb.decode_row(SAMPLE + SAMPLE[4:])


@pytest.mark.parametrize(("raw", "message"), [
    (b"", "empty value"),
    (b"\x00\x01\x02", "2-byte number"),
    (b"\x03\x05\x00\x00\x00ab", "wrong string format, size: 5"),
    (b"\x03\x02\x00\x00\x00\xff\xfe", "invalid UTF-8"),
    (b"\x02\x01\x01", "boolean"),
    (b"\x09\x00", "takes no payload"),
])
def test_bad_values(raw: bytes, message: str) -> None:
    with pytest.raises(PlainBufferError, match=message):
        pb.decode_value(raw)


def test_primary_key_rules() -> None:
    with pytest.raises(PlainBufferError, match="must not carry attribute"):
        pb.decode_primary_key(SAMPLE)
    no_value = HEADER + pb.assemble_row(*pb.encode_primary_key_cells([]),
                                        [pb.encode_cell("c", 1)])
    cell, crc = pb.encode_cell("k", None)
    with pytest.raises(PlainBufferError, match="PK value cannot be NULL, name: 'k'"):
        pb.decode_row(HEADER + pb.assemble_row(cell, [crc], []))
    assert pb.decode_row(no_value).primary_key == []


def test_encode_errors() -> None:
    with pytest.raises(PlainBufferError, match="int64"):
        pb.encode_value(1 << 63)
    with pytest.raises(PlainBufferError, match="int64"):
        pb.encode_cell("c", 1, -(1 << 63) - 1)
    with pytest.raises(PlainBufferError, match="Unsupported value type"):
        pb.encode_value([1])
    with pytest.raises(PlainBufferError, match="no value"):
        pb.encode_primary_key([("k", None)])


@SETTINGS
@given(st.data())
def test_corruption_only_raises_plainbuffererror(data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(SAMPLE) - 1))
    byte = data.draw(st.integers(0, 255))
    mutated = SAMPLE[:index] + bytes((byte,)) + SAMPLE[index + 1:]
    try:
        row = pb.decode_row(mutated)
    except PlainBufferError:
        return
    assert mutated == SAMPLE and row == pb.decode_row(SAMPLE)


@SETTINGS
@given(st.binary(max_size=200))
def test_garbage_only_raises_plainbuffererror(garbage: bytes) -> None:
    kinds = {pb.decode_row: pb.Row, pb.decode_rows: list, pb.decode_value: object}
    for decode, kind in kinds.items():
        try:
            result = decode(HEADER + garbage)
        except PlainBufferError as exc:
            assert str(exc), "a decoding error says what is wrong"
            continue
        # Bytes that happen to parse give the kind of value asked for, never a half-built one.
        assert isinstance(result, kind)
        if decode is pb.decode_rows:
            assert all(isinstance(row, pb.Row) for row in result)
