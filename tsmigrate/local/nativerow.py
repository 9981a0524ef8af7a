"""Fast path for PUT rows that carry a timestamp in every attribute cell.

The rewrite (and any replicating client) sends such rows. The SDK's C parser (`tablestore.native`)
reads the cells and verifies every cell checksum and the row checksum; the key's bytes, checksums,
logical size and timestamp range come from what the parser returned and the cell sizes, without a
byte walk. The result is the `fastrow.PutRow` that `fastrow.parse_put_row` gives for the same row,
plus `latest`: when the names are strictly increasing (one version a column, in order) the row as
stored is the request's row without its header, so `rowdata.make_lean_row` neither sorts nor
re-assembles it; a row of several versions of a column (a rewrite of a table keeping more than
one), or of names out of order, gets None there and is stored as `fastrow`'s would be. Rows this
path does not take (no native parser, a cell without a timestamp, an empty name, no attribute, or
anything the rules below refuse) give None: `fastrow` and then `plainbuffer.decode_row` read them
as before, with the same results and the same errors.

Why the checks are enough: a row is taken only when `data` is exactly the canonical encoding of
what the parser returned (cells `03 04 len32 name 05 len32 vt payload [07 ts] 0A crc`, `01` key
cells `02` attribute cells `09 crc`, nothing else), which `fastrow` reads to the same values.

- The parser checks the tags in a fixed order: 01, key cells (03 04 name 05 value 0A crc: a
  timestamp or a cell type in a key cell fails it), 02, attribute cells (03 04 name, optional 05
  value, optional 06 cell type, optional 07 timestamp, 0A crc), optional 08 delete marker, 09 crc.
  A cell without a value (None) or without a timestamp (a pair) is refused here, so what remains
  optional is a cell type and the delete marker; bytes after the row checksum are not read.
- The canonical size of what it returned is computed here (`pos`, cell after cell). Each value
  re-encodes to the bytes read (a str is strict UTF-8, which round-trips; a number is 8 bytes) and
  each name to its bytes or fewer (a name is read as a C string: a NUL ends it). So that size can
  only fall short of `len(data)`: by cell types, a delete marker, trailing bytes and NUL-cut names.
  Equal sizes rule all of them out, and put every tag, length and value where the canonical
  encoding has it.
- Left are the bytes the parser reads over and no size or checksum covers: each value's len32
  (the parser skips it: the type byte and a string's own len32 decide) and a boolean's byte (any
  non-zero reads as True, checksummed as 1). Both are checked here, cell by cell. Every other
  byte is a tag the parser checked, a length it read with, or under a checksum it verified.
"""

from __future__ import annotations

import struct
from typing import Any

from tsmigrate.local.fastrow import SHORT_VALUE, PutRow
from tsmigrate.wire.plainbuffer import HEADER

try:
    from tablestore.native import NATIVE_AVAILABLE
    from tablestore.native import parse_single_row as _native_parse
except ImportError:  # an SDK without it
    NATIVE_AVAILABLE = False

_ROW_START = HEADER + b"\x01"
_I32 = struct.Struct("<i").unpack_from


def parse_put_row(data: bytes) -> PutRow | None:
    """The row ready to store, with its `latest`, or None when this path does not take it."""
    # A last attribute cell with a timestamp ends `07 ts 0A crc 09 crc`: rows without one go
    # to `fastrow` without a native parse.
    if not NATIVE_AVAILABLE or len(data) < 18 or data[-13] != 0x07 or not data.startswith(_ROW_START):
        return None
    try:
        pk, columns = _native_parse(data)
        return _put_row(data, pk, columns)
    # Malformed (the parser may also return with an error set: SystemError), or not this path's.
    except (ValueError, SystemError, IndexError, struct.error):
        return None


def _put_row(data: bytes, pk: list[tuple[str, Any]], columns: list[tuple[Any, ...]]) -> PutRow | None:
    """The `PutRow` of what the parser returned for `data`, if `data` is its canonical encoding
    (see the module docstring); its `latest` when the names are strictly increasing."""
    if not columns:
        return None
    i32 = _I32
    short = SHORT_VALUE - 5  # a longer str or blob (5 bytes more with its type and len32) is suspect
    # `pos`: where each cell starts in the canonical encoding; a cell is 14 bytes and its name and
    # payload (`size`: after the type byte), 23 with a timestamp; its len32 is at `pos + 7 + nb`.
    pos = 5
    lsize = 0
    suspect = False
    crcs: list[int] = []
    blobs = False
    for name, value in pk:
        nb = len(name) if name.isascii() else len(name.encode())
        t = type(value)
        if t is int:
            size = 8
            lsize += nb + 8
        else:  # str or bytearray (the parser refuses other key types)
            if t is str:
                vb = len(value) if value.isascii() else len(value.encode())
            else:
                vb = len(value)
                blobs = True
            size = vb + 4
            lsize += nb + vb
            suspect = suspect or vb > short
        if not nb or i32(data, pos + 7 + nb)[0] != size + 1:  # an empty name: as fastrow, decode_row
            return None
        pos += 14 + nb + size
        crcs.append(data[pos - 1])
    if blobs:
        pk = [(name, bytes(value) if type(value) is bytearray else value) for name, value in pk]
    pk_end = pos
    pos += 1
    cells: list[tuple[str, object, int, bytes, int]] = []
    previous = ""
    in_order = True
    oldest = newest = columns[0][2]
    for name, value, ts in columns:  # a pair (no timestamp): ValueError
        if not name:  # as fastrow: decode_row names the error
            return None
        if name <= previous:  # a version of the previous column, or out of order
            in_order = False
        previous = name
        nb = len(name) if name.isascii() else len(name.encode())
        t = type(value)
        if t is str:
            vb = len(value) if value.isascii() else len(value.encode())
            size = vb + 4
            lsize += nb + vb
            suspect = suspect or vb > short
        elif t is int:
            size = 8
            lsize += nb + 8
        elif t is float:
            size = 8
            lsize += nb + 8
            suspect = suspect or value - value != 0.0  # NaN or infinite
        elif t is bool:
            if data[pos + 12 + nb] > 1:
                return None
            size = 1
            lsize += nb + 1
        elif t is bytearray:
            value = bytes(value)
            vb = len(value)
            size = vb + 4
            lsize += nb + vb
            suspect = suspect or vb > short
        else:  # no value: a delete
            return None
        if i32(data, pos + 7 + nb)[0] != size + 1:
            return None
        end = pos + 23 + nb + size
        cells.append((name, value, ts, data[pos:end], data[end - 1]))
        pos = end
        if ts < oldest:
            oldest = ts
        elif ts > newest:
            newest = ts
    if pos + 2 != len(data):
        return None
    latest = data[4:] if in_order else None
    return data[5:pk_end], bytes(crcs), pk, cells, lsize, suspect, (oldest, newest), latest
