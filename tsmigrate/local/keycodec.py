"""Order-preserving binary encoding of primary keys, so SQLite's byte order is Tablestore's PK order.

Per column: INF_MIN is `00`, INF_MAX is `FF`, a value is `01` followed by
- INTEGER: 8 bytes big-endian with the sign bit flipped (so negatives sort first);
- BOOLEAN: `00` for false, `01` for true;
- STRING (UTF-8) / BINARY: the bytes with `00` escaped as `00 FF`, then the terminator `00 00`,
  so a value sorts before every longer value it prefixes.
Columns are compared left to right, exactly like Tablestore compares primary keys.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from tsmigrate.wire.plainbuffer import INF_MAX, INF_MIN

_SIGN = 1 << 63
_INTEGER = struct.Struct(">BQ").pack  # 01, then the value with its sign bit flipped


def encode_key(values: Sequence[object]) -> bytes:
    """Encode PK column values (int, bool, str, bytes, INF_MIN or INF_MAX) in schema order."""
    out = []
    for value in values:
        kind = type(value)
        if kind is int:
            out.append(_INTEGER(1, value + _SIGN))  # type: ignore[operator]
        elif kind is bool:
            out.append(b"\x01\x01" if value else b"\x01\x00")
        elif value is INF_MIN:
            out.append(b"\x00")
        elif value is INF_MAX:
            out.append(b"\xff")
        else:
            raw = value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[arg-type]
            out.append(b"\x01" + raw.replace(b"\x00", b"\x00\xff") + b"\x00\x00")
    return b"".join(out)
