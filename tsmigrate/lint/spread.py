"""Key spread measured on rows: where a table's load lands, from a sample of its data.

The model rules (``keys.py``) judge a key by its declaration; these judge it by the rows. For
the partition key (the first key column), from sampled rows, each with its key and its write
time (the newest timestamp of its cells):

- ``partition_key_values``: the distinct values seen;
- ``top_value_share``: the share of the sampled rows under the most common value (and the value):
  a value's rows stay in one partition, which the service cannot split;
- ``recent_span``: the rows split by write time into the newest ``RECENT_SHARE`` (10%) and the
  older rest; the older rows' partition-key values, in key order, cut into ``RANGES`` (64)
  equal-count ranges, the first open below and the last open above; ``recent_span`` is the
  number of ranges holding at least one of the newest rows, over ``RANGES``: near 1 when new
  writes spread over the key range, ``1 / RANGES`` when they all land past its end (sequential
  ids, time-ordered keys). Rows of one partition-key value never straddle two ranges (a
  boundary inside a value's rows moves past them, as the service's partitions do), so a value
  holding many rows is one range however many it would fill.

Rows written in the same millisecond are told apart by a hash of their key, not their key order
(which would make any bulk-loaded table look sequential). A row without attribute cells has no
write time: it counts in the values, not in ``recent_span``.

``tsmigrate analyze`` reports the metrics of a live table with the findings below; ``plan``
measures a rewrite's source key and, through the rewrite's key transform, its new key on one
sample (``KeySpread`` on the step), and the rules here turn what it found into lint findings.
Everything in this module is pure: the sample is read by ``tsmigrate.rewrite.keysample``.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from tsmigrate.lint.core import WARNING, Context, Finding, rule
from tsmigrate.planning import ops

RANGES = 64
RECENT_SHARE = 0.10
# Fewer sampled rows than this are too few to judge: the newest 10% (100 rows) spread at random
# over 64 ranges fill about 79% of them (1 - (63/64)^100), 300 of them 99%.
MIN_ROWS = 1000
# Findings: one value holding more than this share of the rows, new writes spanning less than
# this share of the key range.
HOT_VALUE_SHARE = 0.20
NARROW_SPAN = 0.10
# A rewrite makes the spread worse when its new key's recent_span is under this share of the
# source's, or its top value's share grows by at least WORSE_TOP_POINTS and to at least
# WORSE_TOP_FACTOR times the source's (well beyond what a sample of 1,000 rows or more wobbles).
WORSE_SPAN_FACTOR = 0.75
WORSE_TOP_POINTS = 0.05
WORSE_TOP_FACTOR = 1.5

HOT_VALUE, NARROW_WRITES, WORSE_SPREAD = "TS-SP801", "TS-SP802", "TS-SP803"


def _tiebreak(key: Any) -> bytes:
    """A stable hash of a key: the order of rows written in the same millisecond."""
    return hashlib.blake2b(repr(key).encode("utf-8", "backslashreplace"), digest_size=8).digest()


def _value_text(value: Any) -> str:
    return value.hex() if isinstance(value, (bytes, bytearray)) else repr(value)


def json_value(value: Any) -> Any:
    """A key value as JSON takes it: BINARY as hex."""
    return value.hex() if isinstance(value, (bytes, bytearray)) else value


@attrs.frozen
class Recent:
    """Where the newest rows fall: ``hit`` of ``RANGES`` ranges of the older rows' key order;
    the lowest and highest partition-key values of the newest rows and of the older ones."""

    hit: int
    newest: int  # how many rows count as newest
    low: Any
    high: Any
    older_low: Any
    older_high: Any

    @property
    def span(self) -> float:
        return self.hit / RANGES


def recent(values: Sequence[Any], stamps: Sequence[int | None],
           keys: Sequence[Any] | None = None) -> Recent | None:
    """The newest ``RECENT_SHARE`` of the rows against the ranges of the older rows' partition-key
    ``values`` (``stamps``: each row's write time, None for a row without one; ``keys``: each
    row's whole key, which orders rows written in the same millisecond by its hash, else the
    value does); None when fewer than ``RANGES`` older rows have a write time (no 64 ranges to
    cut)."""
    ties = values if keys is None else keys
    timed = [(stamp, _tiebreak(ties[i]), i) for i, stamp in enumerate(stamps) if stamp is not None]
    if len(stamps) != len(values) or len(ties) != len(values):
        raise ValueError("values, stamps and keys are one a row")
    timed.sort()
    newest_n = max(1, round(len(timed) * RECENT_SHARE))
    older_n = len(timed) - newest_n
    if older_n < RANGES:
        return None
    older = sorted(values[i] for _, _, i in timed[:older_n])
    bounds = [older[(j * older_n) // RANGES] for j in range(1, RANGES)]
    newest = [values[i] for _, _, i in timed[older_n:]]
    hit = {bisect.bisect_right(bounds, value) for value in newest}
    return Recent(len(hit), newest_n, min(newest), max(newest), older[0], older[-1])


@attrs.frozen
class SpreadFinding:
    code: str
    message: str
    fix: str
    severity: str = WARNING

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "message": self.message, "fix": self.fix}


@attrs.frozen
class Spread:
    """The metrics of one key over one sample (see the module's docstring). ``sample`` describes
    how the rows were read (``keysample.Sampled.describe``); ``note`` says why a metric is
    missing (too few rows, no write times, rows the transform rejected)."""

    table: str
    partition_key: str
    rows_sampled: int
    partition_key_values: int
    top_value_share: float | None
    top_value: Any
    recent: Recent | None
    sample: dict[str, Any] = attrs.field(factory=dict)
    note: str = ""

    @property
    def judged(self) -> bool:
        return self.rows_sampled >= MIN_ROWS

    @property
    def recent_span(self) -> float | None:
        return self.recent.span if self.recent is not None and self.judged else None

    @property
    def findings(self) -> list[SpreadFinding]:
        return list(_findings(self)) if self.judged else []

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "partition_key": self.partition_key,
            "rows_sampled": self.rows_sampled,
            "partition_key_values": self.partition_key_values,
            "top_value_share": self.top_value_share,
            "top_value": json_value(self.top_value),
            "recent_span": self.recent_span,
            "recent_ranges": self.recent.hit if self.recent is not None and self.judged else None,
            "judged": self.judged,
            "note": self.note,
            "sample": self.sample,
            "findings": [f.to_dict() for f in self.findings],
        }


def measure(table: str, partition_key: str, keys: Sequence[Sequence[Any]],
            stamps: Sequence[int | None], sample: dict[str, Any] | None = None,
            note: str = "") -> Spread:
    """The metrics of the rows whose keys (the values of the key columns, in order) are ``keys``
    and write times ``stamps`` (None: a row without attribute cells)."""
    values = [key[0] for key in keys]
    counts = Counter(values)
    top_value, top_count = counts.most_common(1)[0] if counts else (None, 0)
    share = top_count / len(values) if values else None
    found = recent(values, stamps, keys)
    notes = [note] if note else []
    if len(values) < MIN_ROWS:
        notes.append(f"{len(values):,} rows sampled: too few to judge (at least {MIN_ROWS:,} needed)")
    elif found is None:
        timed = sum(stamp is not None for stamp in stamps)
        notes.append(f"only {timed:,} of the rows have a write time (rows without attribute cells "
                     "have none): too few to say where new writes land")
    return Spread(table, partition_key, len(values), len(counts), share, top_value, found,
                  dict(sample or {}), "; ".join(notes))


def percent(share: float | None, *, fine: bool = False) -> str:
    """A share as plan and analyze print it: whole percents, or two significant digits below
    10% when ``fine`` (a top value's share: 0.05%, 0.4%, 1.6%)."""
    if share is None:
        return "?"
    return f"{share * 100:.2g}%" if fine and share * 100 < 9.95 else f"{share:.0%}"


def _where(spread: Spread) -> str:
    found = spread.recent
    assert found is not None
    column = spread.partition_key
    if found.low > found.older_high:
        return (f"all past the end of the key range ({column} from {_value_text(found.low)} on, "
                f"the older rows end at {_value_text(found.older_high)})")
    if found.high < found.older_low:
        return (f"all before the start of the key range ({column} up to {_value_text(found.high)}, "
                f"the older rows start at {_value_text(found.older_low)})")
    return f"{column} between {_value_text(found.low)} and {_value_text(found.high)}"


def _findings(spread: Spread) -> Iterator[SpreadFinding]:
    column = spread.partition_key
    share = spread.top_value_share
    if share is not None and share > HOT_VALUE_SHARE:
        value = _value_text(spread.top_value)
        yield SpreadFinding(
            HOT_VALUE,
            f"{column} = {value} holds {percent(share)} of the {spread.rows_sampled:,} sampled "
            f"rows of {spread.table}: all rows of one partition-key value stay in one partition, "
            "which the service cannot split, so that value's reads and writes all go to one "
            "server",
            f"split {value}'s rows over partitions: lead the key with a bucket (PrimaryKey(int, "
            "derive=TimeBucket(...)) or a HashPrefix of a column that varies within the value, "
            f"such as an order or event id), or put a high-cardinality column before {column}",
        )
    span = spread.recent_span
    if span is not None and span < NARROW_SPAN:
        found = spread.recent
        assert found is not None
        yield SpreadFinding(
            NARROW_WRITES,
            f"new writes to {spread.table} span {percent(span)} of the key range: the newest "
            f"{found.newest:,} sampled rows (by write time) fall in {found.hit} of {RANGES} ranges "
            f"of the older rows' {column}, {_where(spread)}; every new row goes to the same "
            "partition, which splitting cannot relieve (sequential ids, time-ordered keys)",
            f"derive {column} with a hash prefix (PrimaryKey(str, derive=HashPrefix("
            f"{column!r}, length=4))) so consecutive values scatter, lead with a bucket "
            "(TimeBucket) where reads need time order, or lead with a different, high-cardinality "
            "column",
        )


@attrs.frozen
class KeySpread:
    """A rewrite's key spread, before the copy: the source key and, through the rewrite's key
    transform, the new key, over one sample of the source."""

    source: Spread
    target: Spread

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source.to_dict(), "target": self.target.to_dict()}

    def text(self) -> str:
        """``new writes span 2% -> 97% of the key range; top value 0.4% -> 0.4%``."""
        source, target = self.source, self.target
        if not source.judged:
            return f"not judged ({source.note})"
        text = (f"new writes span {percent(source.recent_span)} -> {percent(target.recent_span)} "
                f"of the key range; top value {percent(source.top_value_share, fine=True)} -> "
                f"{percent(target.top_value_share, fine=True)}")
        return text + (f" ({target.note})" if target.note else "")

    @property
    def worse(self) -> list[str]:
        """How the new key spreads the rows worse than the source key (empty: it does not)."""
        source, target = self.source, self.target
        if not (source.judged and target.judged):
            return []
        out = []
        before, after = source.recent_span, target.recent_span
        if before is not None and after is not None and after < before * WORSE_SPAN_FACTOR:
            out.append(f"new writes span {percent(before)} -> {percent(after)} of the key range")
        top_before, top_after = source.top_value_share, target.top_value_share
        if (top_before is not None and top_after is not None
                and top_after - top_before >= WORSE_TOP_POINTS
                and top_after >= top_before * WORSE_TOP_FACTOR):
            out.append(f"the top value's share goes {percent(top_before, fine=True)} -> "
                       f"{percent(top_after, fine=True)} ({target.partition_key} = "
                       f"{_value_text(target.top_value)})")
        return out


# --- lint: what plan measured of a rewrite's new key ----------------------------------------------


def _spreads(context: Context) -> Iterator[tuple[int, ops.RewriteTable, KeySpread]]:
    if context.plan is None:
        return
    for number, step in enumerate(context.plan.steps, 1):
        spread = getattr(step, "key_spread", None)
        if isinstance(step, ops.RewriteTable) and isinstance(spread, KeySpread):
            yield number, step, spread


def _target_findings(context: Context, code: str) -> Iterator[Finding]:
    for number, step, spread in _spreads(context):
        for found in spread.target.findings:
            if found.code == code:
                yield context.finding(step.table, f"primary_key.{spread.target.partition_key}",
                                      f"after the rewrite of {step.source}: {found.message}",
                                      found.fix, step=number)


@rule(HOT_VALUE, WARNING, "hot partition-key value (sampled)")
def hot_value(context: Context) -> Iterator[Finding]:
    yield from _target_findings(context, HOT_VALUE)


@rule(NARROW_WRITES, WARNING, "new writes on a narrow key range (sampled)")
def narrow_writes(context: Context) -> Iterator[Finding]:
    yield from _target_findings(context, NARROW_WRITES)


@rule(WORSE_SPREAD, WARNING, "rewrite makes the key spread worse (sampled)")
def worse_spread(context: Context) -> Iterator[Finding]:
    for number, step, spread in _spreads(context):
        worse = spread.worse
        if worse:
            yield context.finding(
                step.table,
                f"primary_key.{spread.target.partition_key}",
                f"the rewrite of {step.source} into {step.table} spreads the sampled rows worse "
                f"than the key it replaces: {'; '.join(worse)}",
                "keep a leading column that spreads writes at least as well as the old key's "
                f"({spread.source.partition_key}): a HashPrefix of a sequential id, a bucket, or a "
                "high-cardinality column first; `tsmigrate analyze` shows the live table's spread",
                step=number,
            )
