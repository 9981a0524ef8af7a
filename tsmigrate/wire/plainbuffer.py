"""Server-side PlainBuffer codec, byte-compatible with the official Tablestore SDKs.

PlainBuffer is the row encoding inside the protobuf messages (request ``primary_key``,
``row``, ``row_change``, filter values; response ``row``, ``rows``,
``next_start_primary_key``). All integers are little-endian::

    buffer := HEADER row*                      (a multi-row buffer has ONE header)
    row    := 0x01 cell* [0x02 cell*] [0x08] 0x09 row_crc
    cell   := 0x03 0x04 len32 name [0x05 len32 vtype payload] [0x06 op] [0x07 int64] 0x0A cell_crc

Checksums are CRC-8 (poly 0x07, init 0). A cell's covers the name bytes, then ``vtype +
payload`` (a string/blob payload including its len32), then the 8 timestamp bytes, then the
op byte: timestamp BEFORE op, although on the wire the op precedes the timestamp (this is how
the SDK writers compute it). A row's covers each cell checksum (primary key cells, then
attribute cells), then one byte: 1 with a delete marker, else 0.

Python values: INTEGER <-> int, DOUBLE <-> float, BOOLEAN <-> bool, STRING <-> str,
BLOB <-> bytes (bytearray/memoryview also encode as BLOB), NULL <-> None, and the
sentinels INF_MIN / INF_MAX / AUTO_INCREMENT. The SDK sends Python ``bytes`` as STRING and
only ``bytearray`` as BLOB; its readers return BLOB values as ``bytearray``.

Decoding (every checksum is verified; errors raise PlainBufferError):
    decode_row(data) -> Row                 one row with header, nothing after it
    decode_rows(data) -> list[Row]          header + any number of rows; b'' -> []
    decode_primary_key(data) -> PrimaryKey  a PK-only row (INF_MIN/INF_MAX/AUTO_INCREMENT allowed)
    decode_value(data) -> object            a bare ``vtype + payload`` (filters, search terms)
    decode_stored_row(row) -> (pk values, versions)   a stored row, one version per column

A decoded cell without a value (delete ops) and a VT_NULL value both give ``value=None``.
The decoder checks structure only; names, value types, NaN/inf, sentinel placement and op
semantics are for the caller to validate.

Encoding (responses; built for caching encoded cells per stored version):
    encode_value(value) -> bytes                        inverse of decode_value
    encode_cell(name, value, timestamp=None) -> (bytes, crc)
    encode_primary_key_cells(pk) -> (bytes, [crc, ...]) PK cells without the 0x01 tag
    assemble_row(pk_bytes, pk_crcs, cells, delete_marker=False) -> bytes   one row, no header
    join_rows(rows) -> bytes                            HEADER + rows, or b'' for no rows
    encode_row(pk, cells=()) -> bytes                   HEADER + one row; cells are
                                                        (name, value[, timestamp]) tuples
    encode_primary_key(pk) -> bytes                     HEADER + PK-only row
    crc8_bytes(crc, data) -> int                        table-driven CRC-8
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AUTO_INCREMENT",
    "HEADER",
    "INF_MAX",
    "INF_MIN",
    "OP_DELETE_ALL",
    "OP_DELETE_ONE",
    "OP_INCREMENT",
    "Cell",
    "PlainBufferError",
    "PrimaryKey",
    "Row",
    "assemble_row",
    "crc8_bytes",
    "decode_primary_key",
    "decode_row",
    "decode_rows",
    "decode_stored_row",
    "decode_value",
    "encode_cell",
    "encode_primary_key",
    "encode_primary_key_cells",
    "encode_row",
    "encode_value",
    "join_rows",
    "logical_size",
    "value_size",
]

HEADER = b"\x75\x00\x00\x00"

TAG_ROW_PK = 0x01
TAG_ROW_DATA = 0x02
TAG_CELL = 0x03
TAG_CELL_NAME = 0x04
TAG_CELL_VALUE = 0x05
TAG_CELL_TYPE = 0x06
TAG_CELL_TIMESTAMP = 0x07
TAG_DELETE_ROW_MARKER = 0x08
TAG_ROW_CHECKSUM = 0x09
TAG_CELL_CHECKSUM = 0x0A

VT_INTEGER = 0x0
VT_DOUBLE = 0x1
VT_BOOLEAN = 0x2
VT_STRING = 0x3
VT_NULL = 0x6
VT_BLOB = 0x7
VT_INF_MIN = 0x9
VT_INF_MAX = 0xA
VT_AUTO_INCREMENT = 0xB

OP_DELETE_ALL = 1
OP_DELETE_ONE = 3
OP_INCREMENT = 4
_OPS = frozenset((OP_DELETE_ALL, OP_DELETE_ONE, OP_INCREMENT))


class PlainBufferError(ValueError):
    """Malformed PlainBuffer data (maps to OTSParameterInvalid); the message says what is wrong."""


class _Sentinel:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name

    def __reduce__(self) -> str:
        # Pickle and copy by module-global name, so the singletons stay singletons.
        return self._name


INF_MIN = _Sentinel("INF_MIN")
INF_MAX = _Sentinel("INF_MAX")
AUTO_INCREMENT = _Sentinel("AUTO_INCREMENT")

PrimaryKey = list[tuple[str, object]]


@dataclass(slots=True)
class Cell:
    name: str
    value: object | None
    op: int | None
    timestamp: int | None


@dataclass(slots=True)
class Row:
    primary_key: PrimaryKey
    cells: list[Cell]
    delete_marker: bool


# --- CRC-8 -----------------------------------------------------------------------------------


def _make_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = ((c << 1) ^ 0x07) & 0xFF if c & 0x80 else (c << 1) & 0xFF
        table.append(c)
    return tuple(table)


_T = _make_table()

# Long inputs: the CRC of bytes D (crc folded into the first byte) is D(x)·x^8 mod P(x), with
# P = x^8 + x^2 + x + 1, and x^127 = 1 mod P. So D can be folded, as one big int (in C), into 127
# bits by xoring its halves at a multiple of 127 bits; the CRC of those 16 bytes is the CRC of D.
_ORDER_BITS = 127
_FOLD_MASKS: dict[int, int] = {}
_T16 = bytes(_T[_T[v >> 8] ^ (v & 0xFF)] for v in range(65536))  # two bytes per step
_WORDS = struct.Struct(">8H").unpack
_LONG = 160  # below this the plain loop is faster


def _crc8_long(crc: int, data: bytes | bytearray | memoryview) -> int:
    bits = 8 * len(data)
    x = int.from_bytes(data, "big") ^ (crc << (bits - 8))
    while bits > _ORDER_BITS:
        keep = _ORDER_BITS * ((bits + 2 * _ORDER_BITS - 1) // (2 * _ORDER_BITS))  # >= half
        mask = _FOLD_MASKS.get(keep)
        if mask is None:
            mask = _FOLD_MASKS[keep] = (1 << keep) - 1
        x = (x >> keep) ^ (x & mask)
        bits = keep
    t16 = _T16
    out = 0
    for word in _WORDS(x.to_bytes(16, "big")):
        out = t16[(out << 8) ^ word]
    return out


def crc8_bytes(crc: int, data: bytes | bytearray | memoryview | Sequence[int]) -> int:
    """Extend CRC-8 (poly 0x07) ``crc`` over ``data`` (any iterable of byte values)."""
    if len(data) >= _LONG and not isinstance(data, (list, tuple)):
        return _crc8_long(crc, data)
    t = _T
    for b in data:
        crc = t[crc ^ b]
    return crc


# --- decoding --------------------------------------------------------------------------------

_S_I32 = struct.Struct("<i")
_S_I64 = struct.Struct("<q")
_S_F64 = struct.Struct("<d")
_unpack_i32 = _S_I32.unpack_from
_unpack_i64 = _S_I64.unpack_from
_unpack_f64 = _S_F64.unpack_from

_PAYLOADLESS = {VT_NULL: None, VT_INF_MIN: INF_MIN, VT_INF_MAX: INF_MAX,
                VT_AUTO_INCREMENT: AUTO_INCREMENT}
_NO_VALUE = object()  # a cell without TAG_CELL_VALUE, as opposed to VT_NULL

# name bytes -> (name, crc of the name); column names repeat across rows.
_NAME_CACHE_MAX = 4096
_decoded_names: dict[bytes, tuple[str, int]] = {}


def _parse_variant(buf: bytes, pos: int, end: int, cell: str | None) -> object:
    """The ``vtype + payload`` occupying exactly ``buf[pos:end]``; ``cell`` names it in errors."""
    size = end - pos
    vt = buf[pos] if size > 0 else None
    if vt in (VT_INTEGER, VT_DOUBLE):
        if size == 9:
            return (_unpack_i64 if vt == VT_INTEGER else _unpack_f64)(buf, pos + 1)[0]
        problem = f"{size - 1}-byte number"
    elif vt in (VT_STRING, VT_BLOB):
        n = _unpack_i32(buf, pos + 1)[0] if size >= 5 else -1
        if n == size - 5:
            raw = buf[pos + 5:end]
            if vt == VT_BLOB:
                return raw
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                problem = "invalid UTF-8 string"
        else:
            problem = f"wrong string format, size: {n} (value has {size - 5} bytes)"
    elif vt == VT_BOOLEAN:
        if size == 2:
            return buf[pos + 1] != 0
        problem = f"invalid boolean real value, value length: {size - 1}"
    elif vt in _PAYLOADLESS:
        if size == 1:
            return _PAYLOADLESS[vt]
        problem = f"value type 0x{vt:02x} takes no payload"
    elif vt is None:
        problem = "empty value"
    else:
        problem = f"unknown variant type 0x{vt:02x}"
    where = "in value" if cell is None else f"at cell {cell!r}"
    raise PlainBufferError(f"Cell data broken, {problem} {where}.")


def _tag_error(buf: bytes, pos: int, expected: str) -> PlainBufferError:
    if pos >= len(buf):
        return PlainBufferError(f"Cell data broken, truncated: data ends where {expected} "
                                f"is expected (offset {pos}).")
    return PlainBufferError(f"Cell data broken, mismatch tag, actual tag(0x{buf[pos]:02x}), "
                            f"expect({expected}) at offset {pos}.")


def _read_cell(buf: bytes, pos: int) -> tuple[str, object, int | None, int | None, int, int]:
    """One cell starting just after TAG_CELL: (name, value|_NO_VALUE, op, ts, crc, next pos)."""
    if buf[pos] != TAG_CELL_NAME:
        raise _tag_error(buf, pos, "TAG_CELL_NAME 0x04")
    (nlen,) = _unpack_i32(buf, pos + 1)
    pos += 5
    end = pos + nlen
    raw = buf[pos:end]
    if nlen < 0 or len(raw) != nlen:
        raise PlainBufferError(f"Cell data broken, truncated cell name (length {nlen}).")
    cached = _decoded_names.get(raw)
    if cached is None:
        try:
            cached = (raw.decode("utf-8"), crc8_bytes(0, raw))
        except UnicodeDecodeError:
            raise PlainBufferError(f"Cell data broken, invalid UTF-8 in cell name {raw!r}.") \
                from None
        if len(_decoded_names) >= _NAME_CACHE_MAX:
            _decoded_names.clear()
        _decoded_names[raw] = cached
    name, crc = cached
    t = _T
    pos = end
    tag = buf[pos]
    start = -1
    if tag == TAG_CELL_VALUE:
        (vlen,) = _unpack_i32(buf, pos + 1)
        start = pos + 5
        pos = start + vlen
        if vlen < 0 or pos > len(buf):
            raise PlainBufferError(f"Cell data broken, truncated value at cell {name!r}.")
        value_end = pos
        if vlen < _LONG:
            for b in buf[start:pos]:  # inlined crc8_bytes: most values are short
                crc = t[crc ^ b]
        else:
            crc = _crc8_long(crc, buf[start:pos])
        tag = buf[pos]
    op = None
    if tag == TAG_CELL_TYPE:
        op = buf[pos + 1]
        if op not in _OPS:
            raise PlainBufferError(f"Cell data broken, unknown cell op type {op} at cell "
                                   f"{name!r}.")
        pos += 2
        tag = buf[pos]
    ts = None
    if tag == TAG_CELL_TIMESTAMP:
        ts_raw = buf[pos + 1:pos + 9]
        if len(ts_raw) != 8:
            raise PlainBufferError(f"Cell data broken, truncated timestamp at cell {name!r}.")
        (ts,) = _unpack_i64(ts_raw)
        for b in ts_raw:
            crc = t[crc ^ b]
        pos += 9
        tag = buf[pos]
    if op is not None:
        crc = t[crc ^ op]
    if tag != TAG_CELL_CHECKSUM:
        raise PlainBufferError(
            f"Cell data broken, cell is not end with checksum[0x0A] tag, name: {name!r} "
            f"(got tag 0x{tag:02x} at offset {pos}).")
    sent = buf[pos + 1]
    if sent != crc:
        raise PlainBufferError(f"Cell data broken, checksum mismatch at cell {name!r}: "
                               f"sent 0x{sent:02x}, computed 0x{crc:02x}.")
    # Parsed after the checksum check, so corruption is reported as such.
    value = _NO_VALUE if start < 0 else _parse_variant(buf, start, value_end, name)
    return name, value, op, ts, crc, pos + 2


def _read_row(buf: bytes, pos: int) -> tuple[Row, int]:
    n = len(buf)
    if pos >= n or buf[pos] != TAG_ROW_PK:
        raise _tag_error(buf, pos, "TAG_ROW_PK 0x01")
    pos += 1
    crcs = bytearray()
    pk: PrimaryKey = []
    while pos < n and buf[pos] == TAG_CELL:
        name, value, op, ts, crc, pos = _read_cell(buf, pos + 1)
        if value is _NO_VALUE or value is None:
            raise PlainBufferError(f"Cell data broken, PK value cannot be NULL, name: {name!r}.")
        if op is not None or ts is not None:
            raise PlainBufferError(
                f"Cell data broken, primary key column {name!r} has a cell type or timestamp.")
        pk.append((name, value))
        crcs.append(crc)
    cells: list[Cell] = []
    if pos < n and buf[pos] == TAG_ROW_DATA:
        pos += 1
        while pos < n and buf[pos] == TAG_CELL:
            name, value, op, ts, crc, pos = _read_cell(buf, pos + 1)
            cells.append(Cell(name, None if value is _NO_VALUE else value, op, ts))
            crcs.append(crc)
    marker = pos < n and buf[pos] == TAG_DELETE_ROW_MARKER
    if marker:
        pos += 1
    if pos >= n or buf[pos] != TAG_ROW_CHECKSUM:
        raise _tag_error(buf, pos, "TAG_ROW_CHECKSUM 0x09")
    if pos + 1 == n:
        raise PlainBufferError("Cell data broken, truncated: the row checksum is missing.")
    crc = _T[crc8_bytes(0, crcs) ^ marker]
    sent = buf[pos + 1]
    if sent != crc:
        raise PlainBufferError(f"Cell data broken, row checksum mismatch: sent 0x{sent:02x}, "
                               f"computed 0x{crc:02x}.")
    return Row(pk, cells, marker), pos + 2


StoredVersions = dict[str, list[tuple[int, object, bytes, int]]]


def decode_stored_row(row: bytes) -> tuple[tuple[object, ...], StoredVersions]:
    """(PK values, {name: [(timestamp, value, cell bytes, cell checksum)]}) of a row without
    header whose every cell carries a timestamp: a stored row's versions (see storage.Version),
    from the row itself."""
    pos = 1  # after TAG_ROW_PK
    pk = []
    while row[pos] == TAG_CELL:
        _, value, _, _, _, pos = _read_cell(row, pos + 1)
        pk.append(value)
    cells: StoredVersions = {}
    if row[pos] == TAG_ROW_DATA:
        pos += 1
        while row[pos] == TAG_CELL:
            start = pos
            name, value, _, ts, crc, pos = _read_cell(row, pos + 1)
            cells[name] = [(ts, value, row[start:pos], crc)]
    return tuple(pk), cells


def _check_header(buf: bytes) -> None:
    if buf[:4] != HEADER:
        raise PlainBufferError(f"Cell data broken, mismatch header, actual: {buf[:4].hex()}, "
                               f"expect: {HEADER.hex()}.")


def _as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    return data if type(data) is bytes else bytes(data)


_TRUNCATED = "Cell data broken, truncated: unexpected end of data."


def decode_rows(data: bytes | bytearray | memoryview) -> list[Row]:
    """Every row of a multi-row buffer (HEADER + rows); an empty buffer has no rows."""
    buf = _as_bytes(data)
    if not buf:
        return []
    _check_header(buf)
    rows = []
    pos = 4
    try:
        while True:
            row, pos = _read_row(buf, pos)
            rows.append(row)
            if pos == len(buf):
                return rows
    except (IndexError, struct.error):
        raise PlainBufferError(_TRUNCATED) from None


def decode_row(data: bytes | bytearray | memoryview) -> Row:
    """The single row of ``data`` (HEADER + row, nothing after it)."""
    buf = _as_bytes(data)
    _check_header(buf)
    try:
        row, pos = _read_row(buf, 4)
    except (IndexError, struct.error):
        raise PlainBufferError(_TRUNCATED) from None
    if pos != len(buf):
        raise PlainBufferError(
            f"Cell data broken, has more data in cell, but they can't be parsed "
            f"({len(buf) - pos} bytes after the row).")
    return row


def decode_primary_key(data: bytes | bytearray | memoryview) -> PrimaryKey:
    """The primary key of a PK-only row."""
    row = decode_row(data)
    if row.cells or row.delete_marker:
        raise PlainBufferError("Cell data broken, a primary key must not carry attribute "
                               "columns or a delete marker.")
    return row.primary_key


def decode_value(data: bytes | bytearray | memoryview) -> object:
    """A bare ``vtype + payload`` value, as in filters and search queries."""
    buf = _as_bytes(data)
    return _parse_variant(buf, 0, len(buf), None)


# --- encoding --------------------------------------------------------------------------------

_S_INT = struct.Struct("<Bq")
_S_DOUBLE = struct.Struct("<Bd")
_S_TAG_LEN = struct.Struct("<Bi")
_pack_int = _S_INT.pack
_pack_double = _S_DOUBLE.pack
_pack_tag_len = _S_TAG_LEN.pack
_pack_i64 = _S_I64.pack
_CELL_CHECKSUM = tuple(bytes((TAG_CELL_CHECKSUM, i)) for i in range(256))
_ROW_CHECKSUM = tuple(bytes((TAG_ROW_CHECKSUM, i)) for i in range(256))
_SENTINEL_BYTES = {INF_MIN: b"\x09", INF_MAX: b"\x0a", AUTO_INCREMENT: b"\x0b"}
_INT64 = range(-(1 << 63), 1 << 63)

# name -> (TAG_CELL TAG_CELL_NAME len32 name, crc of the name)
_encoded_names: dict[str, tuple[bytes, int]] = {}


def encode_value(value: object) -> bytes:
    """``vtype + payload`` of a Python value (see the module docstring for the mapping)."""
    t = type(value)
    if t is int:
        if value not in _INT64:
            raise PlainBufferError(f"Integer {value} is out of the int64 range.")
        return _pack_int(VT_INTEGER, value)
    if t is str:
        raw = value.encode("utf-8")  # type: ignore[union-attr]
        return _pack_tag_len(VT_STRING, len(raw)) + raw
    if t is float:
        return _pack_double(VT_DOUBLE, value)
    if t is bool:
        return b"\x02\x01" if value else b"\x02\x00"
    if t is bytes or t is bytearray or t is memoryview:
        return _pack_tag_len(VT_BLOB, len(value)) + value  # type: ignore[arg-type,operator]
    if value is None:
        return b"\x06"
    if t is _Sentinel:
        return _SENTINEL_BYTES[value]
    # Subclasses (IntEnum, str enums, ...); bool before int.
    for base in (bool, int, float, str, bytes, bytearray):
        if isinstance(value, base):
            return encode_value(base(value))  # type: ignore[call-overload]
    raise PlainBufferError(f"Unsupported value type for PlainBuffer: {t.__name__}.")


def encode_cell(name: str, value: object, timestamp: int | None = None) -> tuple[bytes, int]:
    """One whole cell (TAG_CELL ... TAG_CELL_CHECKSUM crc) and its checksum.

    ``value=None`` writes no value (not VT_NULL, which the SDK readers cannot parse).
    """
    cached = _encoded_names.get(name)
    if cached is None:
        raw = name.encode("utf-8")
        cached = (bytes((TAG_CELL,)) + _pack_tag_len(TAG_CELL_NAME, len(raw)) + raw,
                  crc8_bytes(0, raw))
        if len(_encoded_names) >= _NAME_CACHE_MAX:
            _encoded_names.clear()
        _encoded_names[name] = cached
    prefix, crc = cached
    parts = [prefix]
    if value is not None:
        v = encode_value(value)
        crc = crc8_bytes(crc, v)
        parts += (_pack_tag_len(TAG_CELL_VALUE, len(v)), v)
    if timestamp is not None:
        if timestamp not in _INT64:
            raise PlainBufferError(f"Timestamp {timestamp} is out of the int64 range.")
        ts = _pack_i64(timestamp)
        crc = crc8_bytes(crc, ts)
        parts += (b"\x07", ts)
    parts.append(_CELL_CHECKSUM[crc])
    return b"".join(parts), crc


def encode_primary_key_cells(pk: Iterable[tuple[str, object]]) -> tuple[bytes, list[int]]:
    """The primary key cells (without TAG_ROW_PK) and their checksums."""
    parts = []
    crcs = []
    for name, value in pk:
        if value is None:
            raise PlainBufferError(f"Primary key column {name!r} has no value.")
        cell, crc = encode_cell(name, value)
        parts.append(cell)
        crcs.append(crc)
    return b"".join(parts), crcs


def assemble_row(pk_bytes: bytes, pk_crcs: Sequence[int] | bytes,
                 cells: Sequence[tuple[Any, ...]], delete_marker: bool = False) -> bytes:
    """One row without header from pre-encoded cells (see encode_cell): tuples that end with
    (cell bytes, cell checksum), as a stored version does."""
    t = _T
    crc = 0
    for c in pk_crcs:
        crc = t[crc ^ c]
    if cells:
        parts = [b"\x01", pk_bytes, b"\x02"]
        for cell in cells:
            parts.append(cell[-2])
            crc = t[crc ^ cell[-1]]
    else:
        parts = [b"\x01", pk_bytes]
    if delete_marker:
        parts.append(b"\x08")
        crc = t[crc ^ 1]
    else:
        crc = t[crc]
    parts.append(_ROW_CHECKSUM[crc])
    return b"".join(parts)


def join_rows(rows: Iterable[bytes]) -> bytes:
    """A multi-row buffer (GetRange ``rows``): HEADER + rows, or b'' when there are none."""
    body = b"".join(rows)
    return HEADER + body if body else b""


def encode_row(pk: Iterable[tuple[str, object]],
               cells: Iterable[tuple[str, object] | tuple[str, object, int | None]] = ()
               ) -> bytes:
    """HEADER + one row; ``cells`` are (name, value) or (name, value, timestamp) tuples."""
    pk_bytes, pk_crcs = encode_primary_key_cells(pk)
    encoded = [encode_cell(*cell) for cell in cells]
    return HEADER + assemble_row(pk_bytes, pk_crcs, encoded)


def encode_primary_key(pk: Iterable[tuple[str, object]]) -> bytes:
    """HEADER + a PK-only row (next_start_primary_key, RT_PK return rows)."""
    pk_bytes, pk_crcs = encode_primary_key_cells(pk)
    return HEADER + assemble_row(pk_bytes, pk_crcs, ())


_unpack_u32 = struct.Struct("<I").unpack_from


def logical_size(rows: bytes) -> int:
    """The size the service meters capacity units by: column names plus values (8 bytes for an
    integer or double, 1 for a boolean, the bytes of a string or blob) of every cell in encoded
    rows (no header). Only the structure is walked: the rows are our own encoding."""
    size = 0
    pos, end = 0, len(rows)
    while pos < end:
        tag = rows[pos]
        if tag == TAG_CELL:
            name_len = _unpack_u32(rows, pos + 2)[0]
            size += name_len
            pos += 6 + name_len
            if rows[pos] == TAG_CELL_VALUE:
                payload = _unpack_u32(rows, pos + 1)[0]
                vtype = rows[pos + 5]
                size += payload - 5 if vtype in (VT_STRING, VT_BLOB) else payload - 1
                pos += 5 + payload
            if rows[pos] == TAG_CELL_TYPE:
                pos += 2
            if rows[pos] == TAG_CELL_TIMESTAMP:
                pos += 9
            pos += 2  # TAG_CELL_CHECKSUM crc
        elif tag == TAG_ROW_CHECKSUM:
            pos += 2
        else:  # TAG_ROW_PK, TAG_ROW_DATA, TAG_DELETE_ROW_MARKER
            pos += 1
    return size


def value_size(value: object) -> int:
    """The metered size of one value (see `logical_size`)."""
    if type(value) is bool:
        return 1
    if isinstance(value, (int, float)):
        return 8
    if isinstance(value, str):
        return len(value.encode("utf-8")) if not value.isascii() else len(value)
    if value is None:
        return 0
    return len(value)  # type: ignore[arg-type]
