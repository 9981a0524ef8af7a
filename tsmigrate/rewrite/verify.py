"""Verification: the target holds exactly the transformed source, row for row.

Both directions, per source split, from one order-independent hash: a row's digest covers its
key and every cell (name, value, version timestamp) as encoded, hashed as the bytes the service
returned (no value is decoded); a split's digest is the sum of its rows' digests mod 2**128.
Source -> target: each source row of the split, transformed; for a split whose source rows the
stream shows unchanged since the backfill copied them, the totals that copy recorded
(``copied``) are those rows' totals, so only the target is read again. Target -> source: the
target's rows, counted and hashed. When the target's count and digest equal the sum of every
split's, the tables are equal (a different row would have to be made up for by another with
the very digest it lacks) and so is every split: the target's rows are not attributed to
splits. Otherwise each target row is attributed to the split of the source key it tells
(``source_key_of``), reading the target again, and the splits that differ are named.

A split that differs is compared row by row to name the keys: a source row whose target row
is missing or different, a target row no source row maps to, and collisions (two source rows
for one target key: the target row tells the other source key). Only differing splits are
held in memory, one at a time.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
from tablestore import OTSClient

from tsmigrate.contract.rowbytes import DIGEST_MASK, page_totals, row_digest, scan_rows
from tsmigrate.contract.transform import RowTransform, build, format_key
from tsmigrate.instance.rawclient import RawClient
from tsmigrate.rewrite.copy import PAGE_ROWS, read_page
from tsmigrate.rewrite.job import ConnectionSpec, RewriteJob
from tsmigrate.rewrite.splits import Split, compute, locator
from tsmigrate.schema import Table
from tsmigrate.wire.plainbuffer import INF_MAX, INF_MIN, encode_primary_key

MAX_DIFFERENCES = 10_000
FIRST = 10
UNMAPPED = -1  # target rows that tell no source key

MISSING, EXTRA, DIFFERENT, COLLISION = "missing", "extra", "different", "collision"


@attrs.frozen
class Difference:
    """One row that differs. ``kind``: missing (in the target), extra (in the target),
    different (content), collision (``source_key`` and ``other_source_key`` map to
    ``target_key``; the target holds the other's row)."""

    kind: str
    source_key: list[tuple[str, Any]] | None
    target_key: list[tuple[str, Any]] | None
    other_source_key: list[tuple[str, Any]] | None = None

    def __str__(self) -> str:
        source = format_key(self.source_key) if self.source_key else "-"
        target = format_key(self.target_key) if self.target_key else "-"
        if self.kind == COLLISION:
            return (f"collision: source rows {source} and {format_key(self.other_source_key or [])} "
                    f"both map to target row {target}")
        return f"{self.kind}: source {source} -> target {target}"


@attrs.frozen
class SplitVerdict:
    index: int
    source_rows: int
    target_rows: int
    source_digest: int
    target_digest: int

    @property
    def ok(self) -> bool:
        return self.source_rows == self.target_rows and self.source_digest == self.target_digest


@attrs.frozen
class VerifyReport:
    ok: bool
    per_split: tuple[SplitVerdict, ...]
    source_rows: int
    target_rows: int
    differences: tuple[Difference, ...]  # all found, at most MAX_DIFFERENCES
    truncated: bool  # more differences than kept
    source_from_copy: int = 0  # splits whose source totals came from their copy, not a re-read

    @property
    def first_differences(self) -> tuple[Difference, ...]:
        return self.differences[:FIRST]

    @property
    def collisions(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if d.kind == COLLISION)

    def summary(self) -> str:
        if self.ok:
            return f"verified: {self.source_rows} rows, source and target equal in every split"
        bad = [v.index for v in self.per_split if not v.ok]
        lines = [f"verification failed: source {self.source_rows} rows, target {self.target_rows}; "
                 f"{len(bad)} of {len(self.per_split)} splits differ"]
        lines += [f"  {d}" for d in self.first_differences]
        if len(self.differences) > FIRST:
            more = "+" if self.truncated else ""
            lines.append(f"  ... {len(self.differences) - FIRST}{more} more")
        return "\n".join(lines)


def _full_range(table: Table) -> tuple[bytes, bytes]:
    names = [c.name for c in table.primary_key]
    return (encode_primary_key([(n, INF_MIN) for n in names]),
            encode_primary_key([(n, INF_MAX) for n in names]))


def _pages(raw: RawClient, table: str, start: bytes, end: bytes, versions: int):
    while True:
        buf, following = read_page(raw, table, start, end, PAGE_ROWS, versions)
        yield buf
        if following is None:
            return
        start = following


def _source_rows(raw: RawClient, transform: RowTransform, split: Split):
    """(source key, target key, digest) of every source row of ``split``, transformed."""
    versions = transform.target.options.max_versions  # as many as the copy reads
    for buf in _pages(raw, transform.source.name, split.start_bytes, split.end_bytes, versions):
        yield from transform.page(buf, detail=True).detail or ()


def _target_rows(raw: RawClient, transform: RowTransform, splits: Sequence[Split], start: bytes, end: bytes):
    """(split index, source key or None, target key, digest) of every target row in [start, end)."""
    wanted = transform.recover_columns
    split_of = locator(splits)
    for buf in _pages(raw, transform.target.name, start, end, transform.target.options.max_versions):
        for row in scan_rows(buf, wanted):
            digest = row_digest(buf[row.pk_start:row.pk_end], row.attributes)
            try:
                source_key = transform.source_key_of(row.primary_key, list(row.values.items()))
                index = split_of(source_key)
            except Exception:  # a row no source row could have become
                source_key, index = None, UNMAPPED
            yield index, source_key, row.primary_key, digest


def _key_tuple(key: Sequence[tuple[str, Any]]) -> tuple:
    return tuple(bytes(v) if isinstance(v, bytearray) else v for _, v in key)


def verify(
    spec: ConnectionSpec,
    job: RewriteJob,
    splits: Sequence[Split],
    client: OTSClient | None = None,
    workers: int = 4,
    copied: Mapping[int, tuple[int, int]] | None = None,
    target_bytes: int | None = None,
) -> VerifyReport:
    """Compare source and target; ``workers`` ranges are read at a time on each side.
    ``copied``: split index -> (rows, digest) of source rows known unchanged since they were
    copied; those splits' source rows are not read again. ``target_bytes``: about the target's
    size (what the backfill wrote), to cut its ranges in one call."""
    client = client or spec.client()
    raw = RawClient(client)
    transform = build(job)
    copied = copied or {}

    def source_totals(split: Split) -> tuple[int, int, int]:
        if split.index in copied:
            return split.index, *copied[split.index]
        count = digest = 0
        versions = transform.target.options.max_versions  # as many as the copy reads
        for buf in _pages(raw, transform.source.name, split.start_bytes, split.end_bytes, versions):
            page = transform.page(buf)
            count += len(page.rows)
            digest += page.digest
        return split.index, count, digest

    def target_totals(part: Split) -> tuple[int, int]:
        count = digest = 0
        for buf in _pages(raw, transform.target.name, part.start_bytes, part.end_bytes,
                          transform.target.options.max_versions):
            rows, page_digest = page_totals(buf)
            count += rows
            digest += page_digest
        return count, digest

    def target_totals_by_split(part: Split) -> dict[int, list[int]]:
        totals: dict[int, list[int]] = collections.defaultdict(lambda: [0, 0])
        for index, _, _, row_hash in _target_rows(raw, transform, splits, part.start_bytes, part.end_bytes):
            totals[index][0] += 1
            totals[index][1] += row_hash
        return totals

    with ThreadPoolExecutor(workers, thread_name_prefix="rewrite-verify") as pool:
        source = {index: (count, digest) for index, count, digest in pool.map(source_totals, splits)}
        # The target is read in ranges of its own split points.
        parts = compute(client, transform.target, workers, target_bytes)
        totals = list(pool.map(target_totals, parts))
        source_count = sum(count for count, _ in source.values())
        source_digest = sum(digest for _, digest in source.values())
        equal = (sum(count for count, _ in totals) == source_count
                 and (sum(digest for _, digest in totals) - source_digest) & DIGEST_MASK == 0)
        target: dict[int, list[int]] = collections.defaultdict(lambda: [0, 0])
        if equal:
            target.update({index: list(split_totals) for index, split_totals in source.items()})
        else:
            for part_totals in pool.map(target_totals_by_split, parts):
                for index, (count, digest) in part_totals.items():
                    target[index][0] += count
                    target[index][1] += digest
    verdicts = tuple(
        SplitVerdict(s.index, source[s.index][0], target[s.index][0],
                     source[s.index][1] & DIGEST_MASK, target[s.index][1] & DIGEST_MASK)
        for s in splits
    )
    bad = [v.index for v in verdicts if not v.ok]
    unmapped = target[UNMAPPED][0] > 0
    differences: list[Difference] = []
    if bad or unmapped:
        differences = _differences(client, raw, transform, splits, set(bad))
    return VerifyReport(
        ok=not bad and not unmapped,
        per_split=verdicts,
        source_rows=sum(v.source_rows for v in verdicts),
        target_rows=sum(count for count, _ in target.values()),
        differences=tuple(differences[:MAX_DIFFERENCES]),
        truncated=len(differences) > MAX_DIFFERENCES,
        source_from_copy=sum(1 for s in splits if s.index in copied),
    )


def _differences(
    client: OTSClient, raw: RawClient, transform: RowTransform, splits: Sequence[Split], bad: set[int]
) -> list[Difference]:
    """Row-by-row comparison of the differing splits (and target rows of no split)."""
    found: list[Difference] = []
    by_split: dict[int, dict[tuple, tuple]] = {i: {} for i in bad}
    start, end = _full_range(transform.target)
    for index, source_key, target_key, digest in _target_rows(raw, transform, splits, start, end):
        if index == UNMAPPED:
            found.append(Difference(EXTRA, None, target_key))
        elif index in by_split:
            by_split[index][_key_tuple(target_key)] = (source_key, target_key, digest)
    for split in splits:
        if split.index not in by_split:
            continue
        held = by_split.pop(split.index)
        claimed: dict[tuple, list] = {}
        collided: set[tuple] = set()
        for source_key, target_key, digest in _source_rows(raw, transform, split):
            key = _key_tuple(target_key)
            if key in claimed:  # two source rows of this split map to one target key
                if key not in collided:
                    found.append(Difference(COLLISION, claimed[key], target_key, source_key))
                    collided.add(key)
                continue
            claimed[key] = source_key
            there = held.pop(key, None)
            if there is None:
                found.append(_missing(client, transform, source_key, target_key))
            elif there[0] != source_key:
                found.append(Difference(COLLISION, source_key, target_key, there[0]))
                collided.add(key)
            elif there[2] != digest:
                found.append(Difference(DIFFERENT, source_key, target_key))
            if len(found) > MAX_DIFFERENCES:
                return found
        found += [Difference(EXTRA, s, t) for s, t, _ in held.values()]
    found.sort(key=lambda d: (d.kind != COLLISION, repr(d.source_key or d.target_key)))
    return found


def _missing(client: OTSClient, transform: RowTransform, source_key: list, target_key: list) -> Difference:
    """A source row without its target row in this split: a collision when the target key holds
    another split's source row."""
    _, row, _ = client.get_row(transform.target.name, target_key, max_version=1)
    if row is None:
        return Difference(MISSING, source_key, target_key)
    other = transform.source_key_of(row.primary_key, [tuple(c) for c in row.attribute_columns])
    return Difference(COLLISION, source_key, target_key, other)
