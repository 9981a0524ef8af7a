"""The GetRange calls of one query stream: a fixed key prefix, bounds on the next key column,
the rest of the key open. Pure (no I/O); query.py runs the segments.

A GetRange reads from an inclusive start key to an exclusive end key, every key column given
(INF_MIN / INF_MAX for the open ones); backward, the start is the upper key. Bounds on a column
that is not the last one are exact with the open columns after it padded by INF_MIN or INF_MAX
(no row has those values). On the last key column the bound is the key itself, and backward an
excluded upper or an included lower bound would need the neighbouring key: an integer has one
(``v - 1``), a string or bytes value has none (no largest string sorts below ``"b"``). So such a
range starts at the bound and drops that row (``skip``), or ends at the bound and reads the
bound's own row after it with a one-row read (a ``point`` segment).
"""

from __future__ import annotations

from typing import Any

import attrs
from tablestore import metadata as md

from tsmigrate.keys import INT64_MAX

Key = list[tuple[str, Any]]
Bound = tuple[Any, bool] | None  # (stored value, inclusive); None: open


@attrs.frozen
class Segment:
    """One GetRange: read from ``start`` (inclusive) to ``end`` (exclusive) in its direction."""

    start: Key
    end: Key
    backward: bool = False
    skip: Key | None = None  # a key the range starts with but the query excludes


def stream_segments(
    head: Key, column: str | None, lower: Bound, upper: Bound, rest: list[str], reverse: bool,
) -> list[Segment]:
    """The segments that read, in order, the keys starting with ``head``, whose column
    ``column`` (the next one; None: no bounds) lies within ``lower`` / ``upper``, every
    column in ``rest`` open. Empty when no key can match (a range like ``gte=5, lt=5``)."""
    if column is None:
        if not rest:
            return [_point(head)] if head else []
        return [Segment(*_ends(head + _pad(rest, True), head + _pad(rest, False), reverse),
                        backward=reverse)]
    low_open = [*head, (column, md.INF_MIN), *_pad(rest, True)]
    high_open = [*head, (column, md.INF_MAX), *_pad(rest, False)]

    def at(value: Any, below: bool) -> Key:  # just below / above every key with this value
        return [*head, (column, value), *_pad(rest, below)]

    if rest:  # the bounds fall between keys: exact in both directions
        start = low_open if lower is None else at(lower[0], lower[1])
        end = high_open if upper is None else at(upper[0], not upper[1])
        if not _before(start, end):
            return []
        return [Segment(end, start, backward=True) if reverse else Segment(start, end)]
    # The last key column: a bound is a key.
    start = low_open if lower is None else at(lower[0] if lower[1] else _successor(lower[0]), True)
    end = high_open if upper is None else at(_successor(upper[0]) if upper[1] else upper[0], True)
    if not _before(start, end):
        return []
    if not reverse:
        return [Segment(start, end)]
    segments = []
    if upper is None or upper[1]:
        top, skip = (high_open if upper is None else at(upper[0], True)), None
    elif isinstance(upper[0], int):
        top, skip = (low_open if upper[0] == -INT64_MAX - 1 else at(upper[0] - 1, True)), None
    else:
        top, skip = at(upper[0], True), at(upper[0], True)
    tail: list[Segment] = []
    if lower is None or not lower[1]:
        bottom = low_open if lower is None else at(lower[0], True)
    elif isinstance(lower[0], int):
        bottom = low_open if lower[0] == -INT64_MAX - 1 else at(lower[0] - 1, True)
    else:
        bottom, tail = at(lower[0], True), [_point(at(lower[0], True))]
    if _before(bottom, top):
        segments.append(Segment(top, bottom, backward=True, skip=skip))
    return segments + tail


def _point(key: Key) -> Segment:
    """A one-row read of ``key`` (every column given)."""
    *head, (name, value) = key
    return Segment(key, [*head, (name, _successor(value))])


def _ends(low: Key, high: Key, reverse: bool) -> tuple[Key, Key]:
    return (high, low) if reverse else (low, high)


def _pad(rest: list[str], low: bool) -> Key:
    marker = md.INF_MIN if low else md.INF_MAX
    return [(name, marker) for name in rest]


def _successor(value: Any) -> Any:
    """The smallest key value above ``value`` (INF_MAX above the largest integer)."""
    if isinstance(value, int):
        return md.INF_MAX if value >= INT64_MAX else value + 1
    if isinstance(value, str):
        return value + "\x00"
    return bytes(value) + b"\x00"


def _rank(value: Any) -> tuple[Any, ...]:
    if value is md.INF_MIN or isinstance(value, md.INF_MIN):
        return (0,)
    if value is md.INF_MAX or isinstance(value, md.INF_MAX):
        return (2,)
    return (1, value)


def _before(a: Key, b: Key) -> bool:
    """Key ``a`` sorts strictly before key ``b`` (strings in code point order, which is the
    byte order of their UTF-8, the service's order)."""
    return [_rank(v) for _, v in a] < [_rank(v) for _, v in b]
