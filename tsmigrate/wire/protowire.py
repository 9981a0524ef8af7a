"""Protobuf wire format by hand, for the few messages sent per row (BatchWriteRow's rows): a
message object and its field assignments cost several times the bytes' own encoding."""

from __future__ import annotations

_SHORT_VARINTS = 1 << 14  # lengths below this, encoded in one or two bytes, are kept
_VARINTS = [bytes((n,)) if n < 0x80 else bytes((n & 0x7F | 0x80, n >> 7)) for n in range(_SHORT_VARINTS)]


def varint(n: int) -> bytes:
    """Seven bits a byte, the lowest first, the high bit set on all but the last."""
    if n < _SHORT_VARINTS:
        return _VARINTS[n]
    return bytes((n & 0x7F | 0x80,)) + varint(n >> 7)
