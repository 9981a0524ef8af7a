"""What a planned rewrite will cost, for ``tsmigrate plan``: the data to copy from the source's
split points (ComputeSplitPointsBySize, a read call), scaled to every version the copy reads (a
sampled read), in the key ranges apply will cut, and the time at a rate measured on the instance
(the last rewrite's backfill, else the sampled read's and transform's, with the writes the copy
adds: ``copy_rate``), saying which.

And whether the source's stream keeps its records that long: capture keeps its place at a record
until the split the record falls in has been copied, so a record written as the copy starts must
still be in the stream when the copy and its verification end. Plan (at the stated rate) and
prepare (at the rate it measures on its sample) refuse a rewrite whose projected copy and
verification take more than ``STREAM_MARGIN`` of the stream's expiration (``check_stream``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import attrs

from tsmigrate.planning import ops
from tsmigrate.planning.plan import Plan
from tsmigrate.rewrite import machine
from tsmigrate.schema import Catalog, StreamSpec, Table, physical
from tsmigrate.schema.validate import MAX_STREAM_HOURS

# A copy rate to state instead of measuring one (tests set it); None: plan measures the rate on
# the instance, from the last rewrite's backfill or else a sampled read (``measured_rate``).
RATE_MB_S: float | None = None
# The rate assumed when there is nothing to measure (no earlier rewrite, no row to sample).
ASSUMED_MB_S = 20.0
MB = 1024 * 1024
# Rows a plan reads from the source's ranges to count versions and time a read.
SAMPLE_ROWS = 1000

# Plan writes nothing, so its sample times what the copy does to a row before writing it (the
# read and the transform), and the copy's time is that times WRITE_FACTOR: its BatchWriteRows of
# the same bytes taken to cost as much again. The sample's rate is not multiplied by the workers:
# they share this process (the transform holds the GIL) and the instance's write capacity.
# Measured on the local server (embedded; 2 cores shared with other work, load 5 to 11), on
# tests/rewrite_tables.py's rows (280 bytes copied a row), the backfill against the sampled read
# and transform (copy/sample) and against plan's figure with this factor (planned/copy seconds):
#   rows, workers     40,000 x 1  x 2   x 4   x 8    10,000 x 4 (8 runs)  20,000 x 4
#   copy MB/s         3.01       1.25  2.20  1.57   2.06 to 2.67         2.45
#   copy/sample       0.55       0.32  0.72  0.51
#   planned/copy      1.45             1.18  0.91   0.72 to 0.96         1.01
# Plan's old figure, the read alone (no transform, no write) x 4 workers, was 43 MB/s against a
# 1.7 MB/s copy of the 40,000 rows: "about 1 s" for 6 s. tests/core/test_plan_cost.py checks
# plan's figure against a copy. Against the service, with tens of ms a request, workers overlap
# their round trips (docs/rewrite.md: 1.7 to 3 times the rows/s at 2 to 4 workers) and the
# estimate errs long; after the first rewrite the measured rate of the last one replaces it.
WRITE_FACTOR = 2.0
# Without a transform to time (no target model), the read's time times this stands for the read
# and the transform (the local server, 40,000 rows above, one thread, 5,000-row pages: read
# 0.44 s, transform 1.28 s).
TRANSFORM_FACTOR = 4.0

# Copy and verification together, as a multiple of the copy's time. Verification reads the whole
# target once more, and the source again for the splits capture touched: reads without the copy's
# writes, so about half the copy's time (on the local server it took a sixth; the margin is
# deliberate, since the service's reads are throttled by the same capacity as its writes).
VERIFY_FACTOR = 1.5

# The projected copy and verification must stay under this share of the stream's expiration.
# The projection is rough (a size within one split unit, a rate that moves with the load and,
# in prepare, measured on a few hundred rows), and capture needs records past the copy: catch-up,
# then `rewrite follow` until cut-over. Half leaves room for a projection off by two times.
STREAM_MARGIN = 0.5


class StreamTooShort(machine.RewriteError):
    """The copy and its verification could take longer than the source's stream keeps records."""


def about(seconds: float) -> str:
    """A projected duration as plan shows a rewrite's cost (``ops.RewriteCost.text``)."""
    minutes = seconds / 60
    return f"about {minutes / 60:,.1f} h" if minutes >= 90 else f"about {max(minutes, 0.1):,.1f} min"


def amount(n: float) -> str:
    """Bytes as plan shows a rewrite's size, with KB and bytes below a megabyte."""
    for unit, size in (("GB", 1024 * MB), ("MB", MB), ("KB", 1024)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} bytes"


@attrs.frozen
class Projection:
    """How long a rewrite's copy and verification should take: ``bytes`` at ``rate_b_s`` bytes
    a second, ``rate`` saying where that rate comes from (for the message)."""

    bytes: int
    rate_b_s: float
    rate: str
    row_limit: float | None = None  # --max-rows-per-s, when it is what sets the rate

    @property
    def seconds(self) -> float:
        return self.bytes / self.rate_b_s * VERIFY_FACTOR


def stated(size_bytes: int, rate_mb_s: float) -> Projection:
    """Plan's projection: the size at the stated rate."""
    return Projection(size_bytes, rate_mb_s * MB,
                      f"at the stated {rate_mb_s:g} MB/s (bench/rewrite.py measures yours)")


def stream_after_prepare(stream: StreamSpec) -> StreamSpec:
    """The source's stream as prepare leaves it: an existing stream keeps its expiration, a
    stream that is off is turned on for the longest the service keeps records, as prepare
    does."""
    return stream if stream.enabled else StreamSpec(True, MAX_STREAM_HOURS)


def check_stream(source: str, target: str, projection: Projection, stream: StreamSpec,
                 then: str) -> None:
    """Raise StreamTooShort when the copy and verification ``projection`` could outlive the
    records of the source's ``stream`` (as it is before prepare); ``then`` says how to go on
    once a fix is made."""
    hours = stream_after_prepare(stream).expiration_hours
    allowed_s = hours * 3600 * STREAM_MARGIN
    if projection.seconds <= allowed_s:
        return
    needed_h = math.ceil(projection.seconds / STREAM_MARGIN / 3600)
    kept = (f"the stream of {source} keeps records {hours} h" if stream.enabled else
            f"the stream prepare turns on for {source} keeps records {hours} h")
    fixes = []
    if projection.row_limit is not None:
        fixes.append(f"raise --max-rows-per-s (at {projection.row_limit:g} rows/s it is what "
                     "sets the copy's rate) or leave it out")
    if needed_h <= MAX_STREAM_HOURS:
        fixes.append(f"raise the stream expiration of {source} to {needed_h} h or more: "
                     f'stream="{needed_h}h" on the model of table {source}, applied before the '
                     f"model that replaces it (the service keeps records {MAX_STREAM_HOURS} h at "
                     "most)")
    else:
        fixes.append(f"split {source} into smaller tables and rewrite them one at a time (even "
                     f"the service's longest stream expiration, {MAX_STREAM_HOURS} h, is too short)")
    raise StreamTooShort(
        f"the rewrite of {source} into {target} could outlive the stream records it depends on: "
        f"copying {amount(projection.bytes)} {projection.rate} and verifying it would take "
        f"{about(projection.seconds)} (the copy's time x {VERIFY_FACTOR:g}), but {kept}, and "
        f"the copy and verification must take under {STREAM_MARGIN:.0%} of that "
        f"({allowed_s / 3600:g} h), since capture needs every record written meanwhile; "
        + "; or ".join(fixes) + f"; {then}"
    )


@attrs.frozen
class ReadSample:
    """Rows read from the start of every range: their bytes with the versions the copy reads
    and with the newest only, the seconds the reads with every version took and the seconds
    transforming those pages took (None: not transformed)."""

    rows: int
    bytes_all: int
    bytes_newest: int
    seconds: float
    whole: bool = False  # every range was read to its end: bytes_all is the table's size
    transform_seconds: float | None = None

    @property
    def versions_factor(self) -> float:
        return self.bytes_all / self.bytes_newest if self.bytes_newest else 1.0

    @property
    def work_seconds(self) -> float:
        """What the copy does to these rows before writing them: the read and the transform
        (the transform's time as measured, else ``TRANSFORM_FACTOR`` times the read's)."""
        if self.transform_seconds is None:
            return self.seconds * TRANSFORM_FACTOR
        return self.seconds + self.transform_seconds


def copy_rate(sampled: ReadSample) -> float | None:
    """The bytes a second a copy should run at, from what plan sampled: the read and the
    transform of the sample's rows, and the writes (``WRITE_FACTOR``); None without a sample."""
    if not sampled.rows or sampled.work_seconds <= 0:
        return None
    return sampled.bytes_all / (sampled.work_seconds * WRITE_FACTOR)


def sample_read(client: Any, table: str, ranges: Sequence[Any], versions: int,
                n: int = SAMPLE_ROWS, transform: Any = None) -> ReadSample:
    """Read about ``n`` rows of ``table`` from the start of ``ranges`` (read calls only), with
    ``versions`` versions a cell and again with the newest: split points (on the local server,
    as its docstring says) size the newest versions, the copy reads ``versions``. With
    ``transform`` (a ``RowTransform``), the pages of every version are transformed as the copy
    does, timed apart (a row it rejects leaves them untimed: prepare names it)."""
    from tsmigrate.contract.transform import TransformError
    from tsmigrate.instance.rawclient import RawClient
    from tsmigrate.rewrite import copy
    from tsmigrate.wire.plainbuffer import decode_rows

    raw = RawClient(client)
    per_range = min(copy.PAGE_ROWS, max(1, math.ceil(n / max(1, len(ranges)))))
    rows = bytes_all = bytes_newest = 0
    seconds = 0.0
    transform_seconds: float | None = 0.0 if transform is not None else None
    whole = True
    for split in ranges:
        started = time.perf_counter()
        buf, more = copy.read_page(raw, table, split.start_bytes, split.end_bytes, per_range, versions)
        seconds += time.perf_counter() - started
        whole = whole and more is None
        if not buf:
            continue
        if transform_seconds is not None:
            started = time.perf_counter()
            try:
                transform.page(buf)
            except TransformError:
                transform_seconds = None
            else:
                transform_seconds += time.perf_counter() - started
        rows += len(decode_rows(buf))
        bytes_all += len(buf)
        if versions > 1:
            newest, _ = copy.read_page(raw, table, split.start_bytes, split.end_bytes, per_range, 1)
            bytes_newest += len(newest)
        else:
            bytes_newest += len(buf)
    return ReadSample(rows, bytes_all, bytes_newest, seconds, whole, transform_seconds)


def newest_bytes(client: Any, table: str, want: int = 64) -> int:
    """The size of ``table``'s newest versions from its split points. A split ends once it holds
    the unit, at the next change of partition key (first key column), so ``points x unit``
    undercounts when partitions are large against the unit: at a fine enough unit every
    partition is a split of its own (the finest count gives the partitions, P). Each split then
    overshoots the unit by about half a partition (S / 2P), so S = n u / (1 - n / 2P) at a unit
    u giving n = points + 0.5 splits' worth, taken where the splits are at most half the
    partitions (the unit still decides them)."""
    from tsmigrate.instance.rawclient import RawClient
    from tsmigrate.rewrite import splits

    raw = RawClient(client)
    unit, seen = splits.DEFAULT_UNIT, []
    while True:
        found = raw.compute_split_points_by_size(table, 1, None if unit == splits.DEFAULT_UNIT else unit)
        seen.append((unit, len(found.points)))
        if len(found.points) + 1 >= want or unit <= splits.MIN_UNIT:
            break
        unit = max(splits.MIN_UNIT, unit // 16)
    finest_unit, finest = seen[-1]
    if finest + 1 >= want:  # the unit decides the splits: within one unit of the size
        return int((finest + 0.5) * finest_unit)
    partitions = finest + 1
    decided = [(u, n) for u, n in seen if 0 < n + 1 <= partitions / 2] or [(finest_unit, finest)]
    unit, points = decided[-1]
    n = points + 0.5
    return int(n * unit / max(0.5, 1 - n / (2 * partitions)))


def last_rewrite_rate(client: Any) -> Projection | None:
    """The rate (bytes a second) the most recent backfill on this instance copied at, from its
    rewrite row in the state table; None when no rewrite has copied yet."""
    latest = None
    for rewrite in machine.all_rewrites(client):
        backfill = rewrite.get("backfill") or {}
        if not backfill.get("bytes") or not backfill.get("elapsed_s"):
            continue
        if latest is None or rewrite.get("updated_ms", 0) > latest.get("updated_ms", 0):
            latest = rewrite
    if latest is None:
        return None
    backfill = latest.get("backfill")
    rate = backfill["bytes"] / backfill["elapsed_s"]
    return Projection(0, rate, (
        f"at {rate / MB:.3g} MB/s, measured by the last rewrite on this instance ({latest.source} "
        f"into {latest.target}: {backfill.get('rows', 0):,} rows, {amount(backfill['bytes'])} in "
        f"{backfill['elapsed_s']:,.0f} s)"))


def measured_rate(client: Any, sampled: ReadSample, at_once: int = 1) -> Projection:
    """The copy rate plan states: the last rewrite's on this instance, else ``copy_rate`` of the
    sampled read (and transform), else ASSUMED_MB_S, saying which. ``at_once``, the ranges
    apply copies together, only names them: the estimate does not count on them (``WRITE_FACTOR``)."""
    last = last_rewrite_rate(client)
    if last is not None:
        return last
    rate = copy_rate(sampled)
    if rate is not None:
        did = "read and transform" if sampled.transform_seconds is not None else "read"
        workers = (f"; {at_once} workers copy faster only as far as the instance takes their "
                   "writes at once" if at_once > 1 else "")
        return Projection(0, rate, (
            f"at {rate / MB:.3g} MB/s: a sampled {did} of {sampled.rows:,} rows on this instance "
            f"ran at {sampled.bytes_all / sampled.work_seconds / MB:.3g} MB/s, and the copy also "
            f"writes every row, taken as long again (no rewrite has run here yet{workers})"))
    return Projection(0, ASSUMED_MB_S * MB, f"at an assumed {ASSUMED_MB_S:g} MB/s (nothing to "
                                            "measure: no rewrite has run here and no row was read)")


def _transform(source: Table | None, target: Table | None) -> Any:
    """The copy's row transform from ``source`` (as the live catalog has it, key derivations
    included, as apply's job takes it) into ``target``, or None (either unknown, or a pair the
    transform cannot be built for: prepare says why)."""
    from tsmigrate.contract.transform import build
    from tsmigrate.rewrite.job import RewriteJob

    if source is None or target is None:
        return None
    try:
        return build(RewriteJob("plan", source, target))
    except Exception:  # plan estimates; prepare refuses with the reason
        return None


def rewrite_cost(client: Any, source: Table, target_versions: int, workers: int,
                 rate_mb_s: float | None = None,
                 transform: Any = None) -> tuple[ops.RewriteCost, Projection]:
    """What copying ``source`` costs: the ranges apply will cut for ``workers`` workers, the
    bytes of every version the copy reads (``target_versions``), at a measured (or the given)
    rate; with ``transform`` (the copy's ``RowTransform``), the sample is transformed as the
    copy does, and timed."""
    from tsmigrate.rewrite import splits

    ranges = splits.compute(client, source, workers)  # as prepare cuts them for apply
    sampled = sample_read(client, source.name, ranges, target_versions,
                          transform=None if rate_mb_s else transform)
    factor = max(1.0, sampled.versions_factor)
    # A table the sample read whole has its exact size; else the split points' (newest
    # versions) times the sample's share of older versions.
    total = sampled.bytes_all if sampled.whole else int(newest_bytes(client, source.name) * factor)
    if rate_mb_s:
        projection = attrs.evolve(stated(total, rate_mb_s), bytes=total)
    else:
        at_once = max(1, min(workers, len(ranges)))
        projection = attrs.evolve(measured_rate(client, sampled, at_once), bytes=total)
    versions = ("read whole, every version" if sampled.whole else
                f"every version: {factor:.2g} x the newest, sampled" if factor > 1.005
                else "every version: one a cell, sampled")
    basis = f"the ranges apply cuts for {workers} workers; {versions}"
    return (ops.RewriteCost(total, len(ranges), projection.rate_b_s / MB, projection.rate, basis),
            projection)


def with_costs(client: Any, plan: Plan, rate_mb_s: float | None = None,
               live: Catalog | None = None, models: Catalog | None = None,
               workers: int = 4) -> Plan:
    """``plan`` with every rewrite_table step's cost estimated from the live source. With the
    ``live`` catalog the plan was made from, a rewrite that could outlive its source's stream
    records (the stream as the steps before it leave it) raises StreamTooShort. ``models``
    gives the target's versions (the copy reads as many), ``workers`` apply's workers."""
    from tsmigrate.rewrite import splits

    rate = rate_mb_s or RATE_MB_S  # read at the call: tests state a slow rate
    state = physical(live) if live is not None else None
    steps = []
    for step in plan.steps:
        if isinstance(step, ops.RewriteTable):
            source = state.table(step.source) if state is not None else None
            target = models.table(step.table) if models is not None else None
            if source is not None:
                versions = target.options.max_versions if target is not None else source.options.max_versions
                transform = _transform(live.table(step.source) if live is not None else None, target)
                estimate, projection = rewrite_cost(client, source, versions, workers, rate, transform)
                step = attrs.evolve(step, cost=estimate)
                check_stream(step.source, step.table, projection, source.stream, "then plan again")
            else:
                size = splits.estimate(client, step.source)
                stated_rate = rate or ASSUMED_MB_S
                step = attrs.evolve(step, cost=ops.RewriteCost(
                    size.bytes, size.splits, stated_rate, f"at the stated {stated_rate:g} MB/s"))
        if state is not None:
            state = ops.transform(state, step)
        steps.append(step)
    return attrs.evolve(plan, steps=steps)
