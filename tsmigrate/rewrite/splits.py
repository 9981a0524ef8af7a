"""Cut the source table into key ranges that split tasks copy independently.

ComputeSplitPointsBySize gives points on the first primary-key column; N points make N + 1
ranges ``[INF_MIN, p1), [p1, p2), ... [pN, INF_MAX)``. Its unit is 100 MB by default, so a small
or medium table is one range: the unit is divided until there are enough ranges for the
workers (or the unit is 64 KB), and fine points are thinned to about ``4 x workers`` ranges.

The ranges of a rewrite are computed once and kept in the state table (``save``/``load``), so
a resumed rewrite copies the same ranges whose checkpoints it finds, whatever was written since.
"""

from __future__ import annotations

import bisect
import contextlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import tablestore as ts
from tablestore import OTSClient

from tsmigrate.instance import adapter
from tsmigrate.instance.rawclient import RawClient
from tsmigrate.instance.state import STATE_TABLE, StateRowError
from tsmigrate.schema import Table
from tsmigrate.wire.plainbuffer import INF_MAX, INF_MIN, decode_primary_key, encode_primary_key

DEFAULT_UNIT = 100 * 1024 * 1024
MIN_UNIT = 64 * 1024
SPLITS_PER_WORKER = 4
KIND = "rewrite-splits"


def _bound(key: Sequence[tuple[str, Any]]) -> tuple[tuple[str, Any], ...]:
    """A key with the SDK's INF_MIN / INF_MAX taken as the PlainBuffer codec's."""
    sentinels = {ts.INF_MIN: INF_MIN, ts.INF_MAX: INF_MAX}
    return tuple((name, sentinels.get(value, value) if isinstance(value, type) else value)
                 for name, value in key)


@attrs.frozen
class Split:
    """The source key range ``[start, end)``, padded with INF_MIN / INF_MAX."""

    index: int
    start: tuple[tuple[str, Any], ...] = attrs.field(converter=_bound)
    end: tuple[tuple[str, Any], ...] = attrs.field(converter=_bound)
    estimated_bytes: int = 0

    @property
    def start_bytes(self) -> bytes:
        return encode_primary_key(self.start)

    @property
    def end_bytes(self) -> bytes:
        return encode_primary_key(self.end)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "start": self.start_bytes.hex(), "end": self.end_bytes.hex(),
                "estimated_bytes": self.estimated_bytes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Split:
        return cls(data["index"], decode_primary_key(bytes.fromhex(data["start"])),
                   decode_primary_key(bytes.fromhex(data["end"])), data.get("estimated_bytes", 0))


@attrs.frozen
class SizeEstimate:
    bytes: int
    splits: int
    unit_bytes: int


def _points(raw: RawClient, table: str, want: int, size_hint: int | None = None) -> tuple[list[Any], int]:
    unit = DEFAULT_UNIT
    if size_hint:  # about this many bytes: ask at once with the unit that gives ~2 * want ranges
        unit = min(DEFAULT_UNIT, max(MIN_UNIT, size_hint // (2 * want)))
    while True:
        found = raw.compute_split_points_by_size(table, 1, None if unit == DEFAULT_UNIT else unit)
        points = [point[0][1] for point in found.points]
        if len(points) + 1 >= want or unit <= MIN_UNIT:
            return points, unit
        unit = max(MIN_UNIT, unit // 16)


def _thin(points: list[Any], want: int) -> list[Any]:
    """About ``want`` ranges from more points: every k-th point."""
    if len(points) + 1 <= want * 2:
        return points
    step = (len(points) + 1) / want
    return [points[int(i * step) - 1] for i in range(1, want)]


def ranges(table: Table, points: Sequence[Any], unit: int) -> list[Split]:
    first, rest = table.primary_key[0].name, [c.name for c in table.primary_key[1:]]
    bounds = [INF_MIN, *points, INF_MAX]
    splits = []
    for i in range(len(bounds) - 1):
        low, high = bounds[i], bounds[i + 1]
        start = [(first, low)] + [(name, INF_MIN if low is not INF_MAX else INF_MAX) for name in rest]
        end = [(first, high)] + [(name, INF_MIN if high is not INF_MAX else INF_MAX) for name in rest]
        splits.append(Split(i, start, end, unit))
    return splits


def compute(client: OTSClient, table: Table, workers: int = 1, size_hint: int | None = None) -> list[Split]:
    """Key ranges for ``workers`` workers (about SPLITS_PER_WORKER each, where the data allows).
    ``size_hint``: the table's size in bytes when known, which saves the service calls that
    otherwise find the unit (each is a scan of the table on the local server)."""
    want = max(1, workers * SPLITS_PER_WORKER)
    points, unit = _points(RawClient(client), table.name, want, size_hint)
    thinned = _thin(points, want)
    per_split = unit * (len(points) + 1) // (len(thinned) + 1)
    return ranges(table, thinned, per_split)


def estimate(client: OTSClient, table: str, want: int = 64) -> SizeEstimate:
    """The table's size from its split points (within one unit), for plan's cost estimate."""
    points, unit = _points(RawClient(client), table, want)
    # The last range is partly filled: count it as half.
    return SizeEstimate(bytes=int((len(points) + 0.5) * unit), splits=len(points) + 1, unit_bytes=unit)


def split_of(splits: Sequence[Split], key: Sequence[tuple[str, Any]]) -> int:
    """The index of the range that holds ``key`` (a full source primary key)."""
    return locator(splits)(key)


def locator(splits: Sequence[Split]) -> Callable[[Sequence[tuple[str, Any]]], int]:
    """``split_of`` for many keys: the ranges' bounds are listed once."""
    firsts = [s.start[0][1] for s in splits[1:]]
    return lambda key: bisect.bisect_right(firsts, key[0][1])


# -- kept in the state table ---------------------------------------------------------------------


def _row_key(job_id: str) -> list[tuple[str, Any]]:
    return [("kind", KIND), ("id", job_id)]


def save(client: OTSClient, job_id: str, splits: Sequence[Split]) -> list[Split]:
    """Keep ``splits`` as the job's ranges unless it has some already; returns the job's."""
    text = json.dumps([s.to_dict() for s in splits])
    with contextlib.suppress(adapter.ConditionFailed):  # another run kept its ranges first
        adapter.put_row(client, STATE_TABLE, _row_key(job_id), {"splits": text}, expect="not_exist")
    kept = load(client, job_id)
    assert kept is not None
    return kept


def load(client: OTSClient, job_id: str) -> list[Split] | None:
    row = adapter.get_row(client, STATE_TABLE, _row_key(job_id))
    if row is None:
        return None
    try:
        kept = [Split.from_dict(data) for data in json.loads(row["splits"])]
        if not kept or [s.index for s in kept] != list(range(len(kept))):
            raise ValueError("the ranges are not numbered 0, 1, 2, ...")
        return kept
    except Exception as exc:  # any shape of damage: no column, bad JSON, a bad key
        raise StateRowError(
            f"the key ranges (kind={KIND!r}, id={job_id!r}) of {STATE_TABLE} are malformed "
            f"({type(exc).__name__}: {exc}). They must stay as the rewrite first computed them "
            f"(its split checkpoints refer to them): put back what was edited, or abort the "
            f"rewrite (tsmigrate rewrite abort TARGET) and apply again"
        ) from None


def plan(client: OTSClient, job_id: str, table: Table, workers: int = 1) -> list[Split]:
    """The job's ranges: those kept for it, or new ones, kept."""
    return load(client, job_id) or save(client, job_id, compute(client, table, workers))
