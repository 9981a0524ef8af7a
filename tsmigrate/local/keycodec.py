"""Order-preserving binary encoding of primary keys, so SQLite's byte order is Tablestore's PK order.

Per column: INF_MIN is `00`, INF_MAX is `FF`, a value is `01` followed by
- INTEGER: 8 bytes big-endian with the sign bit flipped (so negatives sort first);
- BOOLEAN: `00` for false, `01` for true;
- STRING (UTF-8) / BINARY: the bytes with `00` escaped as `00 FF`, then the terminator `00 00`,
  so a value sorts before every longer value it prefixes.
Columns are compared left to right, exactly like Tablestore compares primary keys.
"""

from __future__ import annotations

from collections.abc import Sequence

from tsmigrate.local.plainbuffer import INF_MAX, INF_MIN

_SIGN = 1 << 63


def encode_key(values: Sequence[object]) -> bytes:
    """Encode PK column values (int, bool, str, bytes, INF_MIN or INF_MAX) in schema order."""
    out = bytearray()
    for value in values:
        if value is INF_MIN:
            out += b"\x00"
        elif value is INF_MAX:
            out += b"\xff"
        elif type(value) is bool:
            out += b"\x01\x01" if value else b"\x01\x00"
        elif type(value) is int:
            out += b"\x01"
            out += (value + _SIGN).to_bytes(8, "big")
        else:
            raw = value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[arg-type]
            out += b"\x01"
            out += raw.replace(b"\x00", b"\x00\xff")
            out += b"\x00\x00"
    return bytes(out)
