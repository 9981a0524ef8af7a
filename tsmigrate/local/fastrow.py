"""Fast path for the rows of PutRow / BatchWriteRow PUT: one pass that keeps the client's bytes.

A client's cell checksum already covers the cell name and value, so the stored cell (with the
server's timestamp) is the client's cell bytes plus `TAG_CELL_TIMESTAMP ts`, and its checksum is
the client's checksum extended over the 8 timestamp bytes; the PK cells are stored as sent. This
avoids decoding into objects and re-encoding every cell (see wire-protocol.md, "Speed trick").

Only the plain case is handled: no cell ops, no delete marker, no auto-increment placeholder,
well-formed data with correct checksums. Anything else returns None and the caller takes the
general path (`plainbuffer.decode_row`), which also produces the precise error for bad input.
"""

from __future__ import annotations

import struct

from tsmigrate.local.plainbuffer import HEADER, crc8_bytes

_T = tuple(crc8_bytes(0, bytes((i,))) for i in range(256))
_I32 = struct.Struct("<i").unpack_from
_I64 = struct.Struct("<q").unpack_from
_F64 = struct.Struct("<d").unpack_from
_TS = struct.Struct("<q").pack
_CHECKSUM = tuple(bytes((0x0A, i)) for i in range(256))
_ROW_START = HEADER + b"\x01"
_LOOP_MAX = 160  # longer values: `crc8_bytes`, which folds them as one big int

# name bytes -> (name, crc of the name)
_names: dict[bytes, tuple[str, int]] = {}
_NAMES_MAX = 4096

# (pk cells bytes, pk crcs, [(name, value)] of the PK, [(name, value, ts, cell bytes, crc)],
#  logical size: the names and values of every cell, as `plainbuffer.logical_size` meters them)
PutRow = tuple[
    bytes, bytes, list[tuple[str, object]], list[tuple[str, object, int, bytes, int]], int
]


def parse_put_row(data: bytes, now_ms: int) -> PutRow | None:
    """The row with every cell ready to store (server timestamp `now_ms` where none was sent)."""
    try:
        return _parse(data, now_ms)
    except (IndexError, struct.error, UnicodeDecodeError):
        return None


def _parse(data: bytes, now_ms: int) -> PutRow | None:
    if data[:5] != _ROW_START:
        return None
    t = _T
    names = _names
    i32 = _I32
    n = len(data)
    pos = 5
    row_crc = 0
    pk: list[tuple[str, object]] = []
    pk_crcs = bytearray()
    cells: list[tuple[str, object, int, bytes, int]] = []
    ts_bytes = _TS(now_ms)
    extended: dict[int, int] = {}
    in_pk = True
    pk_end = 0
    lsize = 0
    while True:
        tag = data[pos]
        if tag != 0x03:
            if tag == 0x02 and in_pk:
                in_pk = False
                pk_end = pos
                pos += 1
                continue
            break
        start = pos
        # TAG_CELL_NAME len32 name
        if data[pos + 1] != 0x04:
            return None
        (size,) = i32(data, pos + 2)
        lsize += size
        pos += 6
        raw = data[pos : pos + size]
        cached = names.get(raw)
        if cached is None:
            if size <= 0 or len(raw) != size:
                return None
            cached = (raw.decode("utf-8"), crc8_bytes(0, raw))
            if len(names) >= _NAMES_MAX:
                names.clear()
            names[raw] = cached
        name, crc = cached
        pos += size
        # TAG_CELL_VALUE len32 vtype payload
        if data[pos] != 0x05:
            return None
        (size,) = i32(data, pos + 1)
        vstart = pos + 5
        pos = vstart + size
        vt = data[vstart]
        value: object
        if vt == 0 and size == 9:
            value = _I64(data, vstart + 1)[0]
        elif vt == 3 and size >= 5 and i32(data, vstart + 1)[0] == size - 5:
            value = data[vstart + 5 : pos].decode("utf-8")
            lsize -= 4
        elif vt == 7 and size >= 5 and i32(data, vstart + 1)[0] == size - 5 and not in_pk:
            value = data[vstart + 5 : pos]
            lsize -= 4
        elif vt == 1 and size == 9 and not in_pk:
            value = _F64(data, vstart + 1)[0]
        elif vt == 2 and size == 2 and not in_pk:
            value = data[vstart + 1] != 0
        elif vt == 7 and size >= 5 and i32(data, vstart + 1)[0] == size - 5:
            value = data[vstart + 5 : pos]
            lsize -= 4
        else:
            return None  # NULL, INF_MIN/MAX, AUTO_INCREMENT or malformed: the general path decides
        lsize += size - 1  # the value without its type byte (and, above, a string's length)
        if size <= _LOOP_MAX:
            for b in data[vstart:pos]:
                crc = t[crc ^ b]
        else:
            crc = crc8_bytes(crc, data[vstart:pos])
        value_end = pos
        ts = None
        if data[pos] == 0x07:
            if in_pk:
                return None
            (ts,) = _I64(data, pos + 1)
            for b in data[pos + 1 : pos + 9]:
                crc = t[crc ^ b]
            pos += 9
        if data[pos] != 0x0A or data[pos + 1] != crc:
            return None
        pos += 2
        row_crc = t[row_crc ^ crc]
        if in_pk:
            pk.append((name, value))
            pk_crcs.append(crc)
        elif ts is None:
            ext = extended.get(crc)
            if ext is None:
                ext = crc
                for b in ts_bytes:
                    ext = t[ext ^ b]
                extended[crc] = ext
            encoded = b"".join((data[start:value_end], b"\x07", ts_bytes, _CHECKSUM[ext]))
            cells.append((name, value, now_ms, encoded, ext))
        else:
            cells.append((name, value, ts, data[start:pos], crc))
    if in_pk:
        pk_end = pos
    if pos + 2 != n or data[pos] != 0x09 or data[pos + 1] != t[row_crc]:
        return None
    return data[5:pk_end], bytes(pk_crcs), pk, cells, lsize
