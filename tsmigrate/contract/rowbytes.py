"""Rows as PlainBuffer bytes: read a GetRange page without building a Python object per cell.

The copy keeps attribute cells as the bytes the source returned (name, value, timestamp and
cell checksum are the same in the target row), so only the primary key is decoded and encoded
again. That is what makes the copy fast: per row, Python touches a few cells, not every value.

A page is ``HEADER row*``; ``row := 0x01 cell* [0x02 cell*] [0x08] 0x09 crc`` and
``cell := 0x03 0x04 len32 name [0x05 len32 vtype payload] [0x06 op] [0x07 int64] 0x0A crc``
(see tsmigrate/wire/plainbuffer.py). The HTTP body's MD5 is checked by the client before a
page gets here, so cell checksums are carried, not recomputed.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from collections.abc import Sequence
from typing import Any

import attrs

from tsmigrate.wire.plainbuffer import HEADER, PlainBufferError, crc8_bytes

try:
    from tsmigrate.wire import _rowwalk
except ImportError:  # installed where no C compiler was found: the same walks in Python
    _rowwalk = None

_I32 = struct.Struct("<i").unpack_from
_I64 = struct.Struct("<q").unpack_from
_F64 = struct.Struct("<d").unpack_from

# CRC-8 (poly 0x07): one table step per byte, and one per two bytes (``_T2[(crc ^ b0) | b1 << 8]``,
# read as little-endian 16-bit words) for the values of key cells.
_T = tuple(crc8_bytes(0, bytes((i,))) for i in range(256))
_T2 = tuple(_T[_T[u & 0xFF] ^ (u >> 8)] for u in range(1 << 16))
_LITTLE_ENDIAN = sys.byteorder == "little"
CRC8_TABLE = _T
# CRC8_SHIFT[k][c]: the CRC-8 of c followed by k zero bytes. The table step is linear, so the
# CRC from c over k bytes is CRC8_SHIFT[k % 127][c] ^ (the CRC from 0 over them): the step, as a
# permutation of the 255 nonzero values, has order 127.
CRC8_SHIFT: list[tuple[int, ...]] = [tuple(range(256))]
for _ in range(126):
    CRC8_SHIFT.append(tuple(_T[c] for c in CRC8_SHIFT[-1]))
ROW_CHECKSUM = tuple(bytes((0x09, i)) for i in range(256))

DIGEST_BITS = 128
DIGEST_MASK = (1 << DIGEST_BITS) - 1

_names: dict[bytes, str] = {}
_NAMES_MAX = 4096


def row_checksum(pk_crcs: bytes | bytearray | Sequence[int], cell_crcs: bytes | bytearray) -> int:
    """A row's checksum: over each cell checksum, then the delete-marker byte (0)."""
    t = _T
    crc = 0
    for b in pk_crcs:
        crc = t[crc ^ b]
    for b in cell_crcs:
        crc = t[crc ^ b]
    return t[crc]


def content_digest(cells: bytes) -> int:
    """The hash of a row's content: its key cells, 0x02, its attribute cells (versions and
    timestamps included), as encoded."""
    return int.from_bytes(hashlib.blake2b(cells, digest_size=DIGEST_BITS // 8).digest(), "little")


def row_digest(pk_cells: bytes, attribute_cells: bytes) -> int:
    return content_digest(pk_cells + b"\x02" + attribute_cells)


def is_empty_page(buf: bytes) -> bool:
    """Whether a GetRange page holds no rows; a page that does must start with the header."""
    if not buf:
        return True
    if buf[:4] != HEADER:
        raise PlainBufferError(f"a page must start with the PlainBuffer header, got {buf[:4].hex()}")
    return False


def row_end(buf: bytes, pos: int) -> int:
    """Where the next row starts, for a row whose cells end at ``pos``: after the optional
    delete marker and the row checksum."""
    if buf[pos] == 0x08:
        pos += 1
    if buf[pos] != 0x09:
        raise PlainBufferError(f"row checksum tag expected at offset {pos}")
    if pos + 2 > len(buf):
        raise PlainBufferError(f"a row checksum is truncated at offset {pos}")
    return pos + 2


def page_totals(buf: bytes) -> tuple[int, int]:
    """The rows of a page and the sum of their digests (``content_digest`` of each row's key
    cells, 0x02 and attribute cells; not masked), hashed as read: nothing is decoded."""
    if is_empty_page(buf):
        return 0, 0
    if _rowwalk is None:
        return page_totals_in_python(buf)
    try:
        return _rowwalk.page_totals(buf)
    except ValueError as exc:
        raise PlainBufferError(f"a page read back is truncated or malformed ({exc})") from None


def page_totals_in_python(buf: bytes) -> tuple[int, int]:
    """``page_totals`` where the compiled walk is not built (and what tests compare it with)."""
    if is_empty_page(buf):
        return 0, 0
    # One pass: verification runs this on every row of the target.
    i32 = _I32
    digest = content_digest
    count = total = 0
    pos, n = 4, len(buf)
    try:
        while pos < n:
            pos += 1  # TAG_ROW_PK
            start = pos
            while buf[pos] == 0x03:
                pos += 6 + buf[pos + 2]  # a name's len32: names have 1 to 255 bytes
                pos += 7 + i32(buf, pos + 1)[0]  # TAG_CELL_VALUE len32 value TAG_CELL_CHECKSUM crc
            if buf[pos] == 0x02:
                pos += 1
                while buf[pos] == 0x03:
                    pos += 6 + buf[pos + 2]
                    if buf[pos] == 0x05:
                        pos += 5 + i32(buf, pos + 1)[0]
                    if buf[pos] == 0x07:  # a timestamp, then the checksum: most cells
                        pos += 11
                        continue
                    if buf[pos] == 0x06:
                        pos += 2
                    if buf[pos] == 0x07:
                        pos += 9
                    pos += 2  # TAG_CELL_CHECKSUM crc
                content = buf[start:pos]  # key cells, 0x02 and attribute cells: one slice
            else:
                content = buf[start:pos] + b"\x02"
            total += digest(content)
            count += 1
            pos = row_end(buf, pos)
    except (IndexError, struct.error) as exc:
        raise PlainBufferError(f"a page read back is truncated or malformed ({exc})") from None
    return count, total


def _name(buf: bytes, start: int, end: int) -> str:
    raw = buf[start:end]
    name = _names.get(raw)
    if name is None:
        name = raw.decode("utf-8")
        if len(_names) >= _NAMES_MAX:
            _names.clear()
        _names[raw] = name
    return name


def value_at(buf: bytes, start: int, end: int) -> Any:
    """The Python value of ``vtype + payload`` at ``buf[start:end]`` (BLOB -> bytes)."""
    vt = buf[start]
    if vt == 0x0:
        return _I64(buf, start + 1)[0]
    if vt == 0x3:
        return buf[start + 5 : end].decode("utf-8")
    if vt == 0x7:
        return buf[start + 5 : end]
    if vt == 0x1:
        return _F64(buf, start + 1)[0]
    if vt == 0x2:
        return buf[start + 1] != 0
    if vt == 0x6:
        return None
    raise PlainBufferError(f"unexpected value type 0x{vt:02x} in a row read back")


@attrs.define(slots=True)
class ScannedRow:
    """One row of a page: its key decoded, its attribute cells as bytes of the page."""

    primary_key: list[tuple[str, Any]]
    pk_cells: list[tuple[int, int, int]]  # (start, end, crc) of each key cell in the page
    pk_start: int  # the key cells are buf[pk_start:pk_end]
    pk_end: int
    attributes: bytes  # the attribute cells kept (all but the dropped ones)
    crcs: bytes  # their checksums, in order
    values: dict[str, Any]  # newest value of each wanted column present
    # (name, start, end, crc, timestamp) of every attribute cell, when asked for
    cells: list[tuple[str, int, int, int, int]] | None


def scan_rows(
    buf: bytes,
    wanted: frozenset[str] = frozenset(),
    drop: frozenset[str] = frozenset(),
    with_cells: bool = False,
) -> list[ScannedRow]:
    """The rows of a GetRange page. ``wanted`` names the attribute columns whose newest value
    is decoded; ``drop`` those left out of ``attributes``; ``with_cells`` lists every attribute
    cell's position and timestamp."""
    if is_empty_page(buf):
        return []
    i32 = _I32
    names = _names
    look = wanted | drop
    # Lengths of the looked-for names: most cells are passed over without reading their name.
    sizes = frozenset(len(name.encode()) for name in look)
    rows = []
    n = len(buf)
    pos = 4
    try:
        while pos < n:
            pos += 1  # TAG_ROW_PK
            pk_start = pos
            pk = []
            pk_cells = []
            while buf[pos] == 0x03:
                start = pos + 6
                end = start + i32(buf, pos + 2)[0]
                name = names.get(buf[start:end]) or _name(buf, start, end)
                vstart = end + 5
                vend = vstart + i32(buf, end + 1)[0]
                pk.append((name, value_at(buf, vstart, vend)))
                pk_cells.append((pos, vend + 2, buf[vend + 1]))
                pos = vend + 2  # TAG_CELL_CHECKSUM crc
            pk_end = pos
            values: dict[str, Any] = {}
            cells: list[tuple[str, int, int, int, int]] | None = [] if with_cells else None
            crcs = bytearray()
            kept: list[bytes] | None = None  # pieces of the attribute region, once a cell is dropped
            attr_start = attr_end = pos
            if buf[pos] == 0x02:
                pos += 1
                attr_start = piece = pos
                while buf[pos] == 0x03:
                    cell_start = pos
                    size = i32(buf, pos + 2)[0]
                    start = pos + 6
                    pos = end = start + size
                    vstart = -1
                    if buf[pos] == 0x05:
                        vstart = pos + 5
                        pos = vend = vstart + i32(buf, pos + 1)[0]
                    if buf[pos] == 0x06:
                        pos += 2
                    ts = 0
                    if buf[pos] == 0x07:
                        if cells is not None:
                            ts = _I64(buf, pos + 1)[0]
                        pos += 9
                    crc = buf[pos + 1]
                    pos += 2
                    if cells is not None or size in sizes:
                        name = names.get(buf[start:end]) or _name(buf, start, end)
                        if cells is not None:
                            cells.append((name, cell_start, pos, crc, ts))
                        if name in look:
                            if name in wanted and name not in values and vstart >= 0:
                                values[name] = value_at(buf, vstart, vend)
                            if name in drop:
                                if kept is None:
                                    kept = []
                                kept.append(buf[piece:cell_start])
                                piece = pos
                                continue
                    crcs.append(crc)
                attr_end = pos
                if kept is not None:
                    kept.append(buf[piece:attr_end])
            pos = row_end(buf, pos)
            attributes = b"".join(kept) if kept is not None else buf[attr_start:attr_end]
            rows.append(ScannedRow(pk, pk_cells, pk_start, pk_end, attributes, bytes(crcs), values, cells))
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise PlainBufferError(f"a page read back is truncated or malformed ({exc})") from None
    return rows


_S_TAG_LEN = struct.Struct("<Bi").pack
_S_INT = struct.Struct("<Bq").pack
_key_names: dict[str, tuple[bytes, int]] = {}
# (name, type, value) -> (cell, checksum) of recent key cells: new keys often repeat values (a
# keyword, a day) whose checksum would otherwise be computed byte by byte again.
_key_cells: dict[tuple[str, type, Any], tuple[bytes, int]] = {}
_KEY_CELLS_MAX = 8192
_KEY_CELL_CACHED_BYTES = 128  # longer values are rarely repeated
_HASHABLE_KEY_TYPES = (str, int, bytes)


def key_cell(name: str, value: Any) -> tuple[bytes, int]:
    """One primary-key cell (STRING, INTEGER, BINARY) and its checksum: the PlainBuffer codec's
    encoding, with the per-name prefix and checksum and recent cells cached."""
    kind = type(value)
    entry = (name, kind, value)  # the type too: 1 and True are equal and hash alike
    hashable = kind in _HASHABLE_KEY_TYPES
    hit = _key_cells.get(entry) if hashable else None
    if hit is None:
        hit = _encode_key_cell(name, value)
        if hashable and len(hit[0]) <= _KEY_CELL_CACHED_BYTES:
            if len(_key_cells) >= _KEY_CELLS_MAX:
                _key_cells.clear()
            _key_cells[entry] = hit
    return hit


def _encode_key_cell(name: str, value: Any) -> tuple[bytes, int]:
    t, t2 = _T, _T2
    cached = _key_names.get(name)
    if cached is None:
        raw = name.encode("utf-8")
        cached = _key_names[name] = (b"\x03" + _S_TAG_LEN(0x04, len(raw)) + raw, crc8_bytes(0, raw))
    prefix, crc = cached
    kind = type(value)
    if kind is str:
        data = value.encode("utf-8")
        encoded = _S_TAG_LEN(0x03, len(data)) + data
    elif kind is int:
        encoded = _S_INT(0x0, value)
    elif kind is bytes or kind is bytearray:
        encoded = _S_TAG_LEN(0x07, len(value)) + bytes(value)
    else:
        raise PlainBufferError(f"key column {name!r} cannot hold {value!r}")
    if _LITTLE_ENDIAN:
        words = len(encoded) >> 1
        for w in memoryview(encoded)[: words * 2].cast("H"):
            crc = t2[w ^ crc]
        if len(encoded) & 1:
            crc = t[crc ^ encoded[-1]]
    else:
        for b in encoded:
            crc = t[crc ^ b]
    return b"".join((prefix, _S_TAG_LEN(0x05, len(encoded)), encoded, _CELL_CHECKSUM[crc])), crc


_CELL_CHECKSUM = tuple(bytes((0x0A, i)) for i in range(256))


def cell_value(cell: bytes) -> Any:
    """The value of one encoded attribute cell (``0x03 0x04 len32 name [0x05 len32 vtype
    payload] ...``); None for a cell without one."""
    start = 6 + _I32(cell, 2)[0]
    if cell[start] != 0x05:
        return None
    return value_at(cell, start + 5, start + 5 + _I32(cell, start + 1)[0])


def cell_variant(cell: bytes) -> bytes | None:
    """The value of one encoded attribute cell as it came (``vtype + payload``: what
    ``cell_value`` decodes, and what a column condition compares with); None for a cell
    without one."""
    start = 6 + _I32(cell, 2)[0]
    if cell[start] != 0x05:
        return None
    return cell[start + 5 : start + 5 + _I32(cell, start + 1)[0]]


def key_cells(key: Sequence[tuple[str, Any]]) -> tuple[bytes, bytes]:
    """A primary key's cells and their checksums (compiled where built; ``key_cells_in_python``
    for the keys it leaves: values of other types, integers out of int64)."""
    if _rowwalk is not None:
        encoded = _rowwalk.key_cells(key)
        if encoded is not None:
            return encoded
    return key_cells_in_python(key)


def key_cells_in_python(key: Sequence[tuple[str, Any]]) -> tuple[bytes, bytes]:
    """``key_cells`` in Python: each cell by ``key_cell`` (cached)."""
    cells = [key_cell(name, value) for name, value in key]
    return b"".join([c for c, _ in cells]), bytes([crc for _, crc in cells])


def key_row(key: Sequence[tuple[str, Any]]) -> bytes:
    """HEADER + a row of the key alone, as BatchGetRow takes it (``encode_primary_key``)."""
    if _rowwalk is not None:
        encoded = _rowwalk.key_row(key)
        if encoded is not None:
            return encoded
    return key_row_in_python(key)


def key_row_in_python(key: Sequence[tuple[str, Any]]) -> bytes:
    """``key_row`` in Python."""
    cells, crcs = key_cells_in_python(key)
    return b"".join((HEADER, b"\x01", cells, ROW_CHECKSUM[row_checksum(crcs, b"")]))


# An attribute cell as read: (name, timestamp or 0, its encoded bytes, its checksum)
RawCell = tuple[str, int, bytes, int]


def row_cells(
    buf: bytes, wanted: frozenset[str] = frozenset()
) -> tuple[tuple[tuple[str, Any], ...], list[RawCell], dict[str, Any]]:
    """The one row of ``buf`` (HEADER + row: a row read back, or a stream record's): its key
    decoded, every attribute cell as (name, timestamp or 0, the cell's bytes, its checksum), and
    the newest value of each column of ``wanted``. Values are not decoded otherwise. Compiled
    where built (``row_cells_in_python`` otherwise, the same result)."""
    if _rowwalk is None:
        return row_cells_in_python(buf, wanted)
    try:
        return _rowwalk.row_cells(buf, wanted)
    except ValueError as exc:  # a UnicodeDecodeError too, as in Python
        raise PlainBufferError(f"a row read back is truncated or malformed ({exc})") from None


def row_versions(buf: bytes) -> dict[tuple[str, int], tuple[bytes, int]]:
    """The attribute cells of the one row of ``buf`` by (name, timestamp): (bytes, checksum), as
    ``row_cells`` reads them (a later cell of the same version wins); compiled where built."""
    if _rowwalk is None:
        return row_versions_in_python(buf)
    try:
        return _rowwalk.row_versions(buf)
    except ValueError as exc:
        raise PlainBufferError(f"a row read back is truncated or malformed ({exc})") from None


def row_versions_in_python(buf: bytes) -> dict[tuple[str, int], tuple[bytes, int]]:
    """``row_versions`` in Python."""
    return {(c[0], c[1]): (c[2], c[3]) for c in row_cells_in_python(buf)[1]}


def row_cells_in_python(
    buf: bytes, wanted: frozenset[str] = frozenset()
) -> tuple[tuple[tuple[str, Any], ...], list[RawCell], dict[str, Any]]:
    """``row_cells`` where the compiled walk is not built (and what tests compare it with)."""
    if buf[:4] != HEADER:
        raise PlainBufferError(f"a row must start with the PlainBuffer header, got {buf[:4].hex()}")
    i32, i64 = _I32, _I64
    names = _names
    key = []
    cells = []
    values: dict[str, Any] = {}
    pos = 5  # after HEADER and TAG_ROW_PK
    try:
        while buf[pos] == 0x03:
            start = pos + 6
            end = start + i32(buf, pos + 2)[0]
            vstart = end + 5
            pos = vstart + i32(buf, end + 1)[0]
            key.append((names.get(buf[start:end]) or _name(buf, start, end), value_at(buf, vstart, pos)))
            pos += 2  # TAG_CELL_CHECKSUM crc
        if buf[pos] == 0x02:
            pos += 1
            while buf[pos] == 0x03:
                cell = pos
                start = pos + 6
                pos = end = start + i32(buf, pos + 2)[0]
                name = names.get(buf[start:end]) or _name(buf, start, end)
                if buf[pos] == 0x05:
                    vstart = pos + 5
                    pos = vstart + i32(buf, pos + 1)[0]
                    if name in wanted and name not in values:
                        values[name] = value_at(buf, vstart, pos)
                if buf[pos] == 0x06:
                    pos += 2
                stamp = 0
                if buf[pos] == 0x07:
                    stamp = i64(buf, pos + 1)[0]
                    pos += 9
                pos += 2  # TAG_CELL_CHECKSUM crc
                cells.append((name, stamp, buf[cell:pos], buf[pos - 1]))
        row_end(buf, pos)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise PlainBufferError(f"a row read back is truncated or malformed ({exc})") from None
    return tuple(key), cells, values
