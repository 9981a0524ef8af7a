"""Fast path for the rows of PutRow / BatchWriteRow PUT: one pass that keeps the client's bytes.

A client's cell checksum already covers the cell name and value, so the stored cell (with the
server's timestamp) is the client's cell bytes plus `TAG_CELL_TIMESTAMP ts`, and its checksum is
the client's checksum extended over the 8 timestamp bytes; the PK cells are stored as sent. This
avoids decoding into objects and re-encoding every cell (see wire-protocol.md, "Speed trick").

Each value's checksum is still verified. A byte at a time in Python is most of the parse's cost
(stepping two bytes through a 64K table, `plainbuffer._T16`, or folding a big int, `_crc8_long`,
costs more in calls than it saves in steps on 2-60 byte values), so the values of a whole batch
are checked at once (`Checksums`): the CRC is linear and a byte's share of its value's CRC depends
only on its distance from the value's end, so values laid right-aligned in equal slots get their
CRCs from one `bytes.translate` per slot offset over that offset of every slot, XORed as big
integers: a few hundred C calls per batch instead of a Python step per byte. A cell's head (name,
type, length) repeats from row to row: what it implies is looked up once per cell (`_heads`).

Only the plain case is handled: no cell ops, no delete marker, no auto-increment placeholder,
well-formed data with correct checksums. Anything else returns None and the caller takes the
general path (`plainbuffer.decode_row`), which also produces the precise error for bad input.
"""

from __future__ import annotations

import struct

from tsmigrate.wire.plainbuffer import HEADER, crc8_bytes

_T = tuple(crc8_bytes(0, bytes((i,))) for i in range(256))
# The CRC is linear: carried from c over 8 bytes D, it is the CRC from c over 8 zero bytes xor the
# CRC from 0 over D. So one lookup extends a cell's checksum over the server's timestamp.
_OVER_8_ZEROS = tuple(crc8_bytes(c, bytes(8)) for c in range(256))

_SLOT = 64  # the longest value checked with a batch; longer ones are checked as they are parsed
# _OVER_ZEROS[k][c]: the CRC from c carried over k zero bytes.
_OVER_ZEROS = [tuple(range(256))]
for _ in range(_SLOT):
    _OVER_ZEROS.append(tuple(_T[c] for c in _OVER_ZEROS[-1]))
# _SHARES[k]: the translate table of a byte's share in the CRC from 0 of bytes ending k bytes
# after it: that of the byte followed by k zero bytes. (Leading zero bytes add nothing.)
_SHARES = tuple(bytes(_OVER_ZEROS[k][_T[b]] for b in range(256)) for k in range(_SLOT))
_PADS = tuple(bytes(n) for n in range(_SLOT + 1))
CHECK_TOGETHER = 16  # batches of this many rows or more are worth a `Checksums`
_NAME_HEAD = struct.Struct("<Bi").unpack_from  # TAG_CELL_NAME len32
_I32 = struct.Struct("<i").unpack_from
_I64 = struct.Struct("<q").unpack_from
_F64 = struct.Struct("<d").unpack_from
_TS = struct.Struct("<q").pack
_CHECKSUM = tuple(bytes((0x0A, i)) for i in range(256))
_ROW_START = HEADER + b"\x01"
_LOOP_MAX = 160  # longer values: `crc8_bytes`, which folds them as one big int

# A cell's head, from the name's len32 to the value's type byte (`name_len32 name TAG_CELL_VALUE
# value_len32 vtype`: the same for every row of a column of fixed-size values) -> (name, CRC of
# the name and type byte, value size with the type byte, type, the cell's metered size, and for
# `Checksums`: its slot size / 8 (0: too long), the padding before it, the CRC carried over it;
# then the same three for the value followed by a sent timestamp's 8 bytes).
Head = tuple[str, int, int, int, int, int, bytes, int, int, bytes, int]
_heads: dict[bytes, Head] = {}
_HEADS_MAX = 4096
_last_stamp: tuple[int, bytes, int] = (-1, b"", 0)  # see `_stamp`

# Values up to this many bytes are within the service's 2 MB limit (rows.MAX_VALUE_LENGTH) however
# they are measured (a str's characters can take 4 bytes each).
SHORT_VALUE = 512 * 1024

# (timestamp, value, cell bytes, cell checksum): storage.Version
Version = tuple[int, object, bytes, int]

# (pk cells bytes, pk crcs, [(name, value)] of the PK, [(name, value, ts, cell bytes, crc)],
#  logical size: the names and values of every cell, as `plainbuffer.logical_size` meters them,
#  whether a value may be out of bounds: NaN/inf, a long value, and the oldest and newest
#  timestamps sent (None when the server stamps every cell): one range check covers them all,
#  and the row as stored, `latest`, when the cells were sent as it holds them (`nativerow`), else None)
PutRow = tuple[
    bytes, bytes, list[tuple[str, object]], list[tuple[str, object, int, bytes, int]], int, bool,
    tuple[int, int] | None, bytes | None,
]


class Checksums:
    """The cell checksums of rows parsed with it, checked together by `verify`. Values are laid
    in slots of 8, 16, ... `_SLOT` bytes, the shortest that holds them, a bytearray per slot size:
    a batch's values of one column share one, and padding stays short."""

    def __init__(self) -> None:
        # By slot size / 8: the values, right-aligned in their slots, and per value what the CRC
        # from 0 of its slot must be: the checksum sent, xor the CRC the value's cell starts
        # from (name and type byte) carried over the value.
        self.slots = [bytearray() for _ in range(_SLOT // 8 + 1)]
        self.expected = [bytearray() for _ in range(_SLOT // 8 + 1)]
        self.rows: list[bytes] = []  # the rows since the last `verify`

    def verify(self) -> list[bytes]:
        """The rows parsed since the last call whose checksums do not all match: empty when
        every one does, else all of them (`plainbuffer.decode_row` finds the wrong cell)."""
        rows, self.rows = self.rows, []
        right = True
        for eighths, (slots, expected) in enumerate(zip(self.slots, self.expected, strict=True)):
            if expected:
                size = 8 * eighths
                crcs = 0
                for offset in range(size):
                    shares = _SHARES[size - 1 - offset]
                    crcs ^= int.from_bytes(slots[offset::size].translate(shares), "big")
                right = right and crcs.to_bytes(len(expected), "big") == expected
                slots.clear()
                expected.clear()
        return [] if right else rows


def parse_put_row(data: bytes, now_ms: int, checks: Checksums | None = None) -> PutRow | None:
    """The row with every cell ready to store (server timestamp `now_ms` where none was sent).
    With `checks`, the checksums of values up to `_SLOT` bytes are left to `checks.verify`."""
    try:
        return _parse(data, now_ms, checks, True)
    except (IndexError, struct.error, UnicodeDecodeError):
        return None


def stored_versions(latest: bytes) -> tuple[tuple[object, ...], dict[str, list[Version]]] | None:
    """(PK values, {name: [version]}) of a stored row of one version per column (a lean row, see
    `storage`), read from its `latest` encoding: the server wrote it, so its checksums are not
    computed again. None when the fast path does not read it (a boolean key)."""
    try:
        row = _parse(HEADER + latest, 0, None, False)
    except (IndexError, struct.error, UnicodeDecodeError):
        row = None
    if row is None:
        return None
    _, _, pk, cells, _, _, _, _ = row
    versions = {name: [(ts, value, cell, crc)] for name, value, ts, cell, crc in cells}
    return tuple([value for _, value in pk]), versions


def _stamp(now_ms: int) -> tuple[bytes, int]:
    """`TAG_CELL_TIMESTAMP now_ms` and the CRC from 0 of the timestamp: the same for a request's
    rows, so kept for the last `now_ms` seen."""
    global _last_stamp
    last = _last_stamp  # one read: other threads may replace it
    if last[0] != now_ms:
        packed = _TS(now_ms)
        last = _last_stamp = now_ms, b"\x07" + packed, crc8_bytes(0, packed)
    return last[1], last[2]


def _learn(raw: bytes) -> Head | None:
    """The `_heads` entry of a cell head not seen yet; None when it is not one of a plain value."""
    (name_size,) = _I32(raw, 0)
    name = raw[4 : 4 + name_size]
    if name_size <= 0 or len(raw) != name_size + 10 or raw[4 + name_size] != 0x05:
        return None
    (size,) = _I32(raw, 5 + name_size)
    vt = raw[-1]
    if vt in (0, 1) and size == 9:
        metered = 8
    elif vt == 2 and size == 2:
        metered = 1
    elif vt in (3, 7) and size >= 5:
        metered = size - 5
    else:
        return None
    crc = crc8_bytes(0, name + raw[-1:])
    head = (name.decode(), crc, size, vt, name_size + metered,
            *_slot(size - 1, crc), *_slot(size + 7, crc))  # the value is size - 1 bytes
    if len(_heads) >= _HEADS_MAX:
        _heads.clear()
    _heads[raw] = head
    return head


def _slot(length: int, crc: int) -> tuple[int, bytes, int]:
    """For `Checksums`, `length` bytes checked from the CRC `crc`: slot size / 8 (0: too long),
    the padding before them, the CRC carried over them."""
    if length > _SLOT:
        return 0, b"", 0
    eighths = (length + 7) >> 3
    return eighths, _PADS[8 * eighths - length], _OVER_ZEROS[length][crc]


def _parse(data: bytes, now_ms: int, checks: Checksums | None, verify: bool) -> PutRow | None:
    if data[:5] != _ROW_START:
        return None
    if checks is not None:
        slots_by, expected_by = checks.slots, checks.expected
    t = _T
    heads = _heads
    name_head, i64, i32 = _NAME_HEAD, _I64, _I32
    n = len(data)
    pos = 5
    row_crc = 0
    pk: list[tuple[str, object]] = []
    pk_crcs = bytearray()
    cells: list[tuple[str, object, int, bytes, int]] = []
    stamp, stamp_crc = _stamp(now_ms)
    over_zeros = _OVER_8_ZEROS
    in_pk = True
    pk_end = 0
    lsize = 0
    suspect = False
    oldest = newest = None
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
        ntag, name_size = name_head(data, pos + 1)
        if ntag != 0x04:
            return None
        vstart = pos + 12 + name_size  # after the value's type byte
        raw = data[pos + 2 : vstart]
        head = heads.get(raw) or _learn(raw)
        if head is None:
            return None
        name, crc, size, vt, metered, eighths, pad, carried, eighths_ts, pad_ts, carried_ts = head
        lsize += metered
        pos = vstart + size - 1
        value: object
        if vt == 0:
            value = i64(data, vstart)[0]
        elif vt == 3 or vt == 7:
            if i32(data, vstart)[0] != size - 5:
                return None
            value = data[vstart + 4 : pos]
            if vt == 3:
                value = value.decode()
            suspect = suspect or size > SHORT_VALUE
        elif in_pk:
            return None
        elif vt == 1:
            value = _F64(data, vstart)[0]
            suspect = suspect or value - value != 0.0  # NaN or infinite
        else:
            value = data[vstart] != 0
        batched = False  # the checksum over value and timestamp is left to `checks`
        if not verify:  # the cell's checksum is the one it holds, after its timestamp if it has one
            crc = data[pos + 1] if data[pos] == 0x0A else data[pos + 10]
        elif eighths_ts and checks is not None and data[pos] == 0x07 and not in_pk:
            slots = slots_by[eighths_ts]
            slots += pad_ts
            slots += data[vstart:pos]
            slots += data[pos + 1 : pos + 9]
            crc = data[pos + 10]
            expected_by[eighths_ts].append(carried_ts ^ crc)
            batched = True
        elif eighths and checks is not None and data[pos] == 0x0A:
            # Checked with the batch: the cell's checksum is the one sent, if `verify` agrees.
            slots = slots_by[eighths]
            slots += pad
            slots += data[vstart:pos]
            crc = data[pos + 1]
            expected_by[eighths].append(carried ^ crc)
        elif size <= _LOOP_MAX:
            for b in data[vstart:pos]:
                crc = t[crc ^ b]
        else:
            crc = crc8_bytes(crc, data[vstart:pos])
        if data[pos] == 0x0A:  # no timestamp: the server's, its checksum carried over from crc
            if data[pos + 1] != crc:
                return None
            pos += 2
            row_crc = t[row_crc ^ crc]
            if in_pk:
                pk.append((name, value))
                pk_crcs.append(crc)
                continue
            ext = over_zeros[crc] ^ stamp_crc
            cells.append((name, value, now_ms, b"".join((data[start : pos - 2], stamp, _CHECKSUM[ext])), ext))
        elif data[pos] == 0x07 and not in_pk:
            (ts,) = i64(data, pos + 1)
            if verify and not batched:
                for b in data[pos + 1 : pos + 9]:
                    crc = t[crc ^ b]
            pos += 9
            if data[pos] != 0x0A or data[pos + 1] != crc:
                return None
            pos += 2
            row_crc = t[row_crc ^ crc]
            cells.append((name, value, ts, data[start:pos], crc))
            if oldest is None:
                oldest = newest = ts
            elif ts < oldest:
                oldest = ts
            elif ts > newest:  # type: ignore[operator]
                newest = ts
        else:
            return None
    if in_pk:
        pk_end = pos
    if pos + 2 != n or data[pos] != 0x09 or data[pos + 1] != t[row_crc]:
        return None
    if checks is not None:
        checks.rows.append(data)
    sent = None if oldest is None else (oldest, newest)
    return data[5:pk_end], bytes(pk_crcs), pk, cells, lsize, suspect, sent, None  # type: ignore[return-value]
