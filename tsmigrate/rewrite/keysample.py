"""Rows sampled for their keys and write times: what ``tsmigrate analyze`` and plan's key spread
measure (the metrics are ``tsmigrate.lint.spread``'s).

A sample is the whole table up to ``limit`` rows. Beyond that it is spread evenly over the
table's key ranges (its split points, ComputeSplitPointsBySize, thinned to about ``RANGES``): the
first rows of every range, each range given an equal share of ``limit`` and a range that ends
early leaving its unused share to the others. Reads are GetRange pages of the newest version of
every column (a row's write time is its newest cell's timestamp), read calls only; the sample
says what it cost (requests, bytes, and about how many read CUs at 4 KB a unit).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from tsmigrate.errors import TsmigrateError
from tsmigrate.lint.spread import KeySpread, Spread, measure
from tsmigrate.planning import ops
from tsmigrate.planning.plan import Plan
from tsmigrate.schema import Catalog, Table

DEFAULT_ROWS = 100_000  # analyze's --sample
PLAN_ROWS = 10_000  # plan's sample of a rewrite's source (read at the call: tests lower it)
RANGES = 64  # key ranges a sample beyond ``limit`` is spread over (fewer when the table has fewer)
CU_BYTES = 4096

# (key as (name, value) pairs, write time or None, newest value of each wanted column)
Row = tuple[list[tuple[str, Any]], "int | None", dict[str, Any]]


@attrs.define
class Sampled:
    """The rows a sample read, and how: ``whole`` when every range was read to its end."""

    table: str
    key_names: tuple[str, ...]
    limit: int
    ranges: int
    rows: list[Row] = attrs.field(factory=list)
    whole: bool = False
    requests: int = 0
    bytes_read: int = 0
    read_cu: int = 0
    seconds: float = 0.0

    @property
    def method(self) -> str:
        if self.whole:
            return "the whole table"
        share = math.ceil(self.limit / max(1, self.ranges))
        return (f"the first rows of each of {self.ranges} key range{'s' if self.ranges != 1 else ''} "
                f"(split points), up to {share:,} a range: the table holds more rows than the "
                f"sample's {self.limit:,}")

    def describe(self) -> dict[str, Any]:
        return {"rows": len(self.rows), "limit": self.limit, "whole": self.whole,
                "method": self.method, "ranges": self.ranges, "requests": self.requests,
                "bytes_read": self.bytes_read, "read_cu": self.read_cu}


def sample(client: Any, table: Table, limit: int = DEFAULT_ROWS, *,
           wanted: frozenset[str] = frozenset(), ranges: Sequence[Any] | None = None,
           progress: Callable[[int, int], None] | None = None) -> Sampled:
    """Up to ``limit`` rows of ``table`` (read calls only), with the newest value of each column
    of ``wanted`` (what a key transform needs); ``progress(rows, limit)`` after every page."""
    from tsmigrate.contract.rowbytes import scan_rows
    from tsmigrate.instance.rawclient import RawClient
    from tsmigrate.rewrite import splits
    from tsmigrate.rewrite.copy import PAGE_ROWS, read_page

    raw = RawClient(client)
    if ranges is None:
        ranges = splits.compute(client, table, workers=max(1, RANGES // splits.SPLITS_PER_WORKER))
    out = Sampled(table.name, tuple(table.primary_key_names), limit, len(ranges))
    started = time.perf_counter()
    # Where each range continues, and its end; a range leaves ``active`` once read to its end.
    cursors = {i: [split.start_bytes, split.end_bytes] for i, split in enumerate(ranges)}
    active = list(cursors)
    taken = dict.fromkeys(active, 0)
    left = limit

    def read(i: int, want: int) -> bool:
        """Up to ``want`` more rows of range ``i``; whether it was read to its end."""
        nonlocal left
        got = 0
        start, end = cursors[i]
        while got < want:
            buf, following = read_page(raw, table.name, start, end, min(want - got, PAGE_ROWS))
            out.requests += 1
            out.bytes_read += len(buf)
            out.read_cu += max(1, math.ceil(len(buf) / CU_BYTES))
            rows = scan_rows(buf, wanted, with_cells=True)
            for row in rows:
                stamp = max((c[4] for c in row.cells or ()), default=None)
                out.rows.append((row.primary_key, stamp, row.values))
            got += len(rows)
            taken[i] += len(rows)
            left -= len(rows)
            if progress is not None:
                progress(len(out.rows), limit)
            if following is None:
                return True
            start = cursors[i][0] = following
        return False

    while active and left > 0:
        # An equal share each (``extra`` of them one row more, those given fewest so far); what
        # a range that ends early leaves goes round again to the others.
        active.sort(key=lambda i: taken[i])
        share, extra = divmod(left, len(active))
        still = []
        for n, i in enumerate(active):
            want = min(share + (n < extra), left)
            if want <= 0 or not read(i, want):
                still.append(i)
        active = still
    out.whole = not active
    out.seconds = time.perf_counter() - started
    return out


def source_spread(sampled: Sampled) -> Spread:
    """The metrics of the sampled table's own key."""
    keys = [tuple(value for _, value in key) for key, _, _ in sampled.rows]
    return measure(sampled.table, sampled.key_names[0], keys, [stamp for _, stamp, _ in sampled.rows],
                   sampled.describe())


def target_spread(sampled: Sampled, transform: Any) -> Spread:
    """The metrics of the key the sampled rows get through ``transform`` (a rewrite's
    ``RowTransform``): each row keeps its write time (the copy keeps every cell's timestamp);
    rows the transform rejects are left out, and the note says how many."""
    keys, stamps = [], []
    rejected = 0
    for key, stamp, values in sampled.rows:
        try:
            new = transform.target_key(transform.natural(key, list(values.items())), key)
        except TsmigrateError:
            rejected += 1
            continue
        keys.append(tuple(value for _, value in new))
        stamps.append(stamp)
    target = transform.target
    note = (f"{rejected:,} of the sampled rows get no key in {target.name} (the rewrite refuses "
            "them: prepare names them)" if rejected else "")
    return measure(target.name, target.primary_key_names[0], keys, stamps, sampled.describe(), note)


def key_spread(client: Any, source: Table, target: Table, limit: int | None = None,
               custom: str | None = None) -> KeySpread:
    """The rewrite of ``source`` into ``target``, measured before the copy: one sample of the
    source, its key's metrics and those of the new key its rows get (``custom``: a key
    transform's reference, as the rewrite takes it)."""
    from tsmigrate.contract.transform import RowTransform

    try:
        transform = RowTransform.build(source, target, custom)
    except TsmigrateError as exc:
        transform, why = None, str(exc)
    sampled = sample(client, source, limit or PLAN_ROWS,
                     wanted=transform.key_sources if transform is not None else frozenset())
    before = source_spread(sampled)
    if transform is None:
        after = measure(target.name, target.primary_key_names[0], [], [], sampled.describe(),
                        f"the new key cannot be computed: {why}")
    else:
        after = target_spread(sampled, transform)
    return KeySpread(before, after)


def with_key_spreads(client: Any, plan: Plan, live: Catalog, models: Catalog,
                     limit: int | None = None) -> Plan:
    """``plan`` with every rewrite_table step's key spread (``key_spread``) measured on its
    source, as ``live`` has it (key derivations included), into the table ``models`` declare."""
    steps = []
    for step in plan.steps:
        if isinstance(step, ops.RewriteTable) and step.key_spread is None:
            source, target = live.table(step.source), models.table(step.table)
            if source is not None and target is not None:
                step = attrs.evolve(step, key_spread=key_spread(client, source, target, limit))
        steps.append(step)
    return attrs.evolve(plan, steps=steps)
