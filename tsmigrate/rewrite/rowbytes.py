"""Rows as PlainBuffer bytes: read a GetRange page without building a Python object per cell.

The copy keeps attribute cells as the bytes the source returned (name, value, timestamp and
cell checksum are the same in the target row), so only the primary key is decoded and encoded
again. That is what makes the copy fast: per row, Python touches a few cells, not every value.

A page is ``HEADER row*``; ``row := 0x01 cell* [0x02 cell*] [0x08] 0x09 crc`` and
``cell := 0x03 0x04 len32 name [0x05 len32 vtype payload] [0x06 op] [0x07 int64] 0x0A crc``
(see tsmigrate/local/plainbuffer.py). The HTTP body's MD5 is checked by the client before a
page gets here, so cell checksums are carried, not recomputed.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import attrs

from tsmigrate.local.plainbuffer import HEADER, PlainBufferError, crc8_bytes

_I32 = struct.Struct("<i").unpack_from
_I64 = struct.Struct("<q").unpack_from
_F64 = struct.Struct("<d").unpack_from

# CRC-8 (poly 0x07): one table step per byte.
_T = tuple(crc8_bytes(0, bytes((i,))) for i in range(256))
ROW_CHECKSUM = tuple(bytes((0x09, i)) for i in range(256))

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
    """One row of a page: its key decoded, its attribute cells as positions in the page."""

    primary_key: list[tuple[str, Any]]
    pk_start: int  # the PK cells are buf[pk_start:pk_end]
    pk_end: int
    attr_start: int  # the attribute cells are buf[attr_start:attr_end] (empty when equal)
    attr_end: int
    crcs: bytearray  # the attribute cells' checksums, in order
    values: dict[str, Any]  # newest value of each wanted column present
    # (name, start, end, crc, timestamp) of every attribute cell, when asked for
    cells: list[tuple[str, int, int, int, int]] | None


def scan_rows(buf: bytes, wanted: frozenset[str] = frozenset(), with_cells: bool = False) -> list[ScannedRow]:
    """The rows of a GetRange page. ``wanted`` names the attribute columns whose newest value
    is decoded; ``with_cells`` lists every attribute cell's position."""
    if not buf:
        return []
    if buf[:4] != HEADER:
        raise PlainBufferError(f"a page must start with the PlainBuffer header, got {buf[:4].hex()}")
    i32 = _I32
    name_of = _name
    rows = []
    n = len(buf)
    pos = 4
    try:
        while pos < n:
            pos += 1  # TAG_ROW_PK
            pk_start = pos
            pk = []
            while buf[pos] == 0x03:
                start = pos + 6
                end = start + i32(buf, pos + 2)[0]
                name = name_of(buf, start, end)
                vstart = end + 5
                vend = vstart + i32(buf, end + 1)[0]
                pk.append((name, value_at(buf, vstart, vend)))
                pos = vend + 2  # TAG_CELL_CHECKSUM crc
            pk_end = pos
            crcs = bytearray()
            values: dict[str, Any] = {}
            cells: list[tuple[str, int, int, int, int]] | None = [] if with_cells else None
            attr_start = attr_end = pos
            if buf[pos] == 0x02:
                pos += 1
                attr_start = pos
                while buf[pos] == 0x03:
                    cell_start = pos
                    start = pos + 6
                    end = start + i32(buf, pos + 2)[0]
                    name = name_of(buf, start, end)
                    pos = end
                    vstart = vend = -1
                    if buf[pos] == 0x05:
                        vstart = pos + 5
                        vend = vstart + i32(buf, pos + 1)[0]
                        pos = vend
                    if buf[pos] == 0x06:
                        pos += 2
                    ts = 0
                    if buf[pos] == 0x07:
                        if cells is not None:
                            ts = _I64(buf, pos + 1)[0]
                        pos += 9
                    crc = buf[pos + 1]
                    pos += 2
                    crcs.append(crc)
                    if name in wanted and name not in values and vstart >= 0:
                        values[name] = value_at(buf, vstart, vend)
                    if cells is not None:
                        cells.append((name, cell_start, pos, crc, ts))
                attr_end = pos
            if buf[pos] == 0x08:
                pos += 1
            if buf[pos] != 0x09:
                raise PlainBufferError(f"row checksum tag expected at offset {pos}")
            pos += 2
            rows.append(ScannedRow(pk, pk_start, pk_end, attr_start, attr_end, crcs, values, cells))
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise PlainBufferError(f"a page read back is truncated or malformed ({exc})") from None
    return rows
