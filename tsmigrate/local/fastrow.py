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

# name bytes -> (name, crc of the name)
_names: dict[bytes, tuple[str, int]] = {}
_NAMES_MAX = 4096

# (pk cells bytes, pk crcs, [(name, value)] of the PK, [(name, value, ts, cell bytes, crc)])
PutRow = tuple[bytes, bytes, list[tuple[str, object]], list[tuple[str, object, int, bytes, int]]]


def parse_put_row(data: bytes, now_ms: int) -> PutRow | None:
    """The row with every cell ready to store (server timestamp `now_ms` where none was sent)."""
    try:
        return _parse(data, now_ms)
    except (IndexError, struct.error, UnicodeDecodeError):
        return None


def _parse(data: bytes, now_ms: int) -> PutRow | None:
    if data[:4] != HEADER or data[4] != 0x01:
        return None
    t = _T
    n = len(data)
    pos = 5
    row_crc = 0
    pk: list[tuple[str, object]] = []
    pk_crcs = bytearray()
    while data[pos] == 0x03:
        cell = _cell(data, pos + 1)
        if cell is None or cell[3] is not None or cell[1] is None:
            return None
        name, value, crc, _, _, pos = cell
        pk.append((name, value))
        pk_crcs.append(crc)
        row_crc = t[row_crc ^ crc]
    pk_bytes = data[5:pos]
    cells: list[tuple[str, object, int, bytes, int]] = []
    if data[pos] == 0x02:
        pos += 1
        ts_bytes = _TS(now_ms)
        extended: dict[int, int] = {}
        while data[pos] == 0x03:
            start = pos
            cell = _cell(data, pos + 1)
            if cell is None or cell[1] is None:
                return None
            name, value, crc, ts, value_end, pos = cell
            if ts is None:
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
            row_crc = t[row_crc ^ crc]
    if pos + 2 != n or data[pos] != 0x09 or data[pos + 1] != t[row_crc]:
        return None
    return pk_bytes, bytes(pk_crcs), pk, cells


def _cell(data: bytes, pos: int) -> tuple[str, object, int, int | None, int, int] | None:
    """(name, value, crc, timestamp, end of the value part, next position) of a cell without op."""
    t = _T
    if data[pos] != 0x04:
        return None
    (size,) = _I32(data, pos + 1)
    pos += 5
    raw = data[pos : pos + size]
    cached = _names.get(raw)
    if cached is None:
        if size <= 0 or len(raw) != size:
            return None
        cached = (raw.decode("utf-8"), crc8_bytes(0, raw))
        if len(_names) >= _NAMES_MAX:
            _names.clear()
        _names[raw] = cached
    name, crc = cached
    pos += size
    if data[pos] != 0x05:
        return None
    (size,) = _I32(data, pos + 1)
    start = pos + 5
    end = start + size
    vt = data[start]
    value: object
    if vt == 0 and size == 9:
        value = _I64(data, start + 1)[0]
    elif vt == 3 and size >= 5 and _I32(data, start + 1)[0] == size - 5:
        value = data[start + 5 : end].decode("utf-8")
    elif vt == 7 and size >= 5 and _I32(data, start + 1)[0] == size - 5:
        value = data[start + 5 : end]
    elif vt == 1 and size == 9:
        value = _F64(data, start + 1)[0]
    elif vt == 2 and size == 2:
        value = data[start + 1] != 0
    else:
        return None  # NULL, INF_MIN/MAX, AUTO_INCREMENT or malformed: the general path decides
    for b in data[start:end]:
        crc = t[crc ^ b]
    pos = end
    ts = None
    if data[pos] == 0x07:
        (ts,) = _I64(data, pos + 1)
        for b in data[pos + 1 : pos + 9]:
            crc = t[crc ^ b]
        pos += 9
    if data[pos] != 0x0A or data[pos + 1] != crc:
        return None
    return name, value, crc, ts, end, pos + 2
