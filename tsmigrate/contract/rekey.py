"""The backfill's fast path: a new key made of cells the row already has, in one pass.

Most rewrites only move columns: the new key is some of the old key's columns, reordered, plus
attributes that enter the key (no derivation on either side, no custom transform, no field of
the old key becoming an attribute). A target row is then the source row's bytes rearranged: the
key cells copied from the old key as they are, an attribute's newest version becoming a key cell
(the same bytes up to its value, and a checksum over name and value), the other attribute cells
copied with their checksums. ``Rekey.page`` walks each row's cells once and builds its target
row, without decoding any value or building an object per row (compiled, ``_rowwalk.c``, where
the install had a C compiler; the same loop in Python otherwise); ``RowTransform.page`` gives the
same bytes and digest through the general path, which it falls back to when a row does not fit
(a key attribute missing or of another type: the general path names the row and why).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import attrs

from tsmigrate.contract.rowbytes import (
    CRC8_SHIFT,
    CRC8_TABLE,
    ROW_CHECKSUM,
    content_digest,
    is_empty_page,
    key_cell,
    row_end,
    value_at,
)
from tsmigrate.schema import BINARY, INTEGER, STRING, Table
from tsmigrate.wire.plainbuffer import HEADER, PlainBufferError

try:
    from tsmigrate.wire import _rowwalk
except ImportError:  # installed where no C compiler was found: the same walks in Python
    _rowwalk = None

_I32 = struct.Struct("<i").unpack_from
# The value type byte a key column of each type holds.
_VTYPES = {STRING: 0x03, INTEGER: 0x00, BINARY: 0x07}
# Raw ``name + value`` bytes of an attribute cell -> (key cell, checksum, value type), for every
# transform of the process (split tasks build their own): keys built from attributes repeat
# values (a keyword, a day) across rows and splits.
_key_cells: dict[bytes, tuple[bytes, int, int]] = {}
_KEY_CELLS_MAX = 16384
_KEY_CELL_CACHED_BYTES = 160


class NotRekeyable(Exception):
    """A row the fast path does not build: the general path takes the page."""


@attrs.frozen
class Rekey:
    """How a target key is made of a source row's cells: per target key column, the index of
    the source key column copied, or the (name, value type) of the attribute moved."""

    parts: tuple[int | tuple[bytes, int], ...]
    moved: frozenset[bytes]  # names of the attributes leaving the attribute cells (every version)

    @classmethod
    def plan(cls, source: Table, target: Table, copies: Sequence[int | None],
             dropped: frozenset[str]) -> Rekey | None:
        """The plan for a transform that only moves columns; None for any other."""
        if any(c.derivation for c in (*source.primary_key, *target.primary_key)):
            return None
        parts: list[int | tuple[bytes, int]] = []
        for column, copy in zip(target.primary_key, copies, strict=True):
            vtype = _VTYPES.get(column.type)
            if vtype is None:
                return None
            if copy is None:
                parts.append((column.name.encode("utf-8"), vtype))
            elif source.primary_key[copy].type != column.type:
                return None  # the general path names the rows whose key has the wrong type
            else:
                parts.append(copy)
        return cls(tuple(parts), frozenset(n.encode("utf-8") for n in dropped))

    def page(self, buf: bytes) -> tuple[list[bytes], int, int]:
        """The encoded target rows of a GetRange page (HEADER + row each), the sum of their
        digests (not masked) and their bytes. Raises NotRekeyable for a row that does not fit."""
        if is_empty_page(buf):
            return [], 0, 0
        if _rowwalk is None:
            return self.page_in_python(buf)
        try:
            done = _rowwalk.rekey_page(buf, self.parts, self.moved)
        except ValueError as exc:
            raise PlainBufferError(f"a page read back is truncated or malformed ({exc})") from None
        if done is None:
            raise NotRekeyable("a key column's attribute is missing or of another type")
        return done

    def page_in_python(self, buf: bytes) -> tuple[list[bytes], int, int]:
        """``page`` where the compiled walk is not built (and what tests compare it with)."""
        if is_empty_page(buf):
            return [], 0, 0
        # Names bound locally: this loop is most of a backfill's CPU.
        i32 = _I32
        t = CRC8_TABLE
        parts = self.parts
        moved = self.moved
        sizes = frozenset(len(name) for name in moved)
        cache = _key_cells
        digest = content_digest
        row_checksum = ROW_CHECKSUM
        shift = CRC8_SHIFT
        out = []
        total = 0
        n = len(buf)
        pos = 4
        try:
            while pos < n:
                pos += 1  # TAG_ROW_PK
                key_cells = []  # (start, end) of each source key cell, its checksum last
                while buf[pos] == 0x03:
                    start = pos
                    pos += 6 + buf[pos + 2]  # a name's len32: names have 1 to 255 bytes
                    pos += 7 + i32(buf, pos + 1)[0]  # TAG_CELL_VALUE len32 value TAG_CELL_CHECKSUM crc
                    key_cells.append((start, pos))
                # moved name -> (key cell, its checksum, value type) of its newest version
                found: dict[bytes, tuple[bytes, int, int]] = {}
                # The attribute cells' part of the row checksum (from 0; CRC-8 is linear, so
                # the key cells' part, computed once the key is known, is shifted over it).
                attribute_crc = kept = 0
                pieces = [b"\x02"]
                if buf[pos] == 0x02:
                    pos += 1
                    piece = pos
                    while buf[pos] == 0x03:
                        cell = pos
                        name_size = buf[pos + 2]
                        pos += 6 + name_size
                        value_end = pos
                        if buf[pos] == 0x05:
                            pos = value_end = pos + 5 + i32(buf, pos + 1)[0]
                        if buf[pos] == 0x07:  # a timestamp, then the checksum: most cells
                            pos += 11
                        else:
                            if buf[pos] == 0x06:
                                pos += 2
                            if buf[pos] == 0x07:
                                pos += 9
                            pos += 2
                        if name_size in sizes:
                            name = buf[cell + 6 : cell + 6 + name_size]
                            if name in moved:
                                if name not in found and value_end > cell + 6 + name_size:
                                    raw = buf[cell:value_end]
                                    found[name] = cache.get(raw) or _cached_key_cell(raw, name)
                                if piece < cell:
                                    pieces.append(buf[piece:cell])
                                piece = pos
                                continue
                        attribute_crc = t[attribute_crc ^ buf[pos - 1]]
                        kept += 1
                    if piece < pos:
                        pieces.append(buf[piece:pos])
                pos = row_end(buf, pos)
                crc = 0
                cells = [HEADER, b"\x01"]
                for part in parts:
                    if part.__class__ is int:
                        start, end = key_cells[part]  # type: ignore[index]
                        cells.append(buf[start:end])
                        crc = t[crc ^ buf[end - 1]]
                        continue
                    hit = found.get(part[0])  # type: ignore[index]
                    if hit is None or hit[2] != part[1]:  # type: ignore[index]
                        raise NotRekeyable(part[0])  # type: ignore[index]
                    cells.append(hit[0])
                    crc = t[crc ^ hit[1]]
                if kept:
                    crc = shift[kept % 127][crc] ^ attribute_crc
                    cells += pieces
                cells.append(row_checksum[t[crc]])
                row = b"".join(cells)
                out.append(row)
                # The digest covers the key cells, 0x02 and the attribute cells: the row but its
                # header, TAG_ROW_PK and checksum (0x02 added when it has no attribute cells)
                total += digest(row[5:-2] if kept else row[5:-2] + b"\x02")
        except (IndexError, struct.error, UnicodeDecodeError) as exc:  # a damaged string too
            raise PlainBufferError(f"a page read back is truncated or malformed ({exc})") from None
        return out, total, sum(map(len, out)) - 4 * len(out)


def _cached_key_cell(raw: bytes, name: bytes) -> tuple[bytes, int, int]:
    """The key cell, its checksum and value type of an attribute cell's ``name + value``
    (``raw``); a value no key column holds (a DOUBLE, a BOOLEAN) gets no cell, and its type
    makes the row NotRekeyable."""
    value_start = 6 + len(name) + 5
    vtype = raw[value_start]
    if vtype in _VTYPES.values():
        cell, crc = key_cell(name.decode("utf-8"), value_at(raw, value_start, len(raw)))
    else:
        cell, crc = b"", 0
    hit = (cell, crc, vtype)
    if len(raw) <= _KEY_CELL_CACHED_BYTES:
        if len(_key_cells) >= _KEY_CELLS_MAX:
            _key_cells.clear()
        _key_cells[raw] = hit
    return hit
