"""Whether change capture can keep up with the source's writes.

Capture applies a stream's shards in parallel, one shard per worker at a time (``shards.py``),
so ``--workers`` workers on a stream of S shards apply min(workers, S) shards at once: more
workers than shards do not help. Plan and prepare compare the source's recent write rate, read
from its stream, with what capture applies per worker, and say (naming both figures and the
workers) whether the workers given keep up.

- The write rate (``sample_writes``): the records that arrive on every shard of the source's
  stream within a short window, read from the position capture starts at (prepare) or from
  each shard's start (plan), saving nothing. Prepare measures it once and keeps it on the
  rewrite (``source_writes``); plan uses that for a rewrite in progress, else samples the stream
  only when it is on (for half as long), else says the rate is unknown until prepare measures it.
- What capture applies per worker: what capture measured on this instance (a rewrite's saved
  stats: the shards it read full pages of, i.e. while it was behind: ``per_worker_from_stats``),
  else an estimate from one measured round trip to the service (``estimated_per_worker``).
- The verdict (``decide``, pure): ``ok`` when the workers apply at least ``HEADROOM`` times the
  writes (they must also drain what capture is behind: the copy's records, a pause), ``tight``
  when they keep pace without that room, ``short`` when they fall behind; for the last two, how
  many workers would do, and whether the stream has shards enough for them.

Prepare saves its verdict on the rewrite (``capture_capacity``); apply shows it as prepare hands
over to the backfill (``announcing``), ``rewrite status`` with the rewrite, ``plan`` with each
rewrite it shows (text, Markdown, JSON). A warning only: nothing is refused.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import tablestore as ts

from tsmigrate.rewrite import machine

SAMPLE_S = 2.0  # how long prepare watches the stream (plan: half as long); tests shorten it
SAMPLE_PAGE = 1000  # records a GetStreamRecord while sampling (the service's most)
SKIP_PAGES = 20  # pages a shard is read to reach its newest records before the window opens
DRAIN_PAGES = 50  # pages a shard is read as the window closes
SAMPLE_THREADS = 16
ROUND_TRIPS = 4  # a page of capture: the stream read, source rows, target rows, the write
# Capture's client CPU a record applied (decode, merge, encode, its share of the requests):
# bench/capture.py measured 39-44 µs at --shards 4 --latency-ms 30 and 48-60 µs at its defaults
# on a 2-core machine. Threads of one process share it (the GIL): about 20,000 records/s in all.
CPU_S_PER_RECORD = 50e-6
HEADROOM = 1.2  # capture applies this much more than the writes to drain a lag as well
ROUND_TRIP_TRIES = 3
# A per-worker rate to state instead of measuring one (tests set it); None: measured.
PER_WORKER_RECORDS_S: float | None = None

OK, TIGHT, SHORT, UNKNOWN = "ok", "tight", "short", "unknown"
WARNINGS = (TIGHT, SHORT)


@attrs.frozen
class Rate:
    """Records a second (None: unknown) and where the figure comes from (for the message)."""

    records_per_s: float | None
    basis: str
    shards: int | None = None  # the stream's open shards, when the figure read them


@attrs.frozen
class Check:
    """The verdict on one rewrite's capture: the figures, where each comes from, and the text
    plan, prepare and status show."""

    table: str
    status: str  # OK, TIGHT, SHORT or UNKNOWN
    warning: bool
    writes_per_s: float | None
    writes_basis: str
    per_worker_per_s: float
    per_worker_basis: str
    workers: int
    shards: int | None  # the stream's open shards (None: not known, the stream is off)
    capacity_per_s: float  # what the workers apply together (no more than one per shard)
    needed_workers: int | None  # the fewest that keep up with room (None: ok or unknown)
    enough_shards: bool  # whether the stream has a shard for each of those
    text: str

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _workers(n: int) -> str:
    return f"{n} worker{'s' if n != 1 else ''}"


def _stream_shards(n: int) -> str:
    return "the stream's only shard" if n == 1 else f"the stream's {n} shards"


def decide(table: str, writes: Rate, per_worker: Rate, workers: int,
           shards: int | None = None, *, until: str = " until prepare measures it") -> Check:
    """Whether ``workers`` workers applying ``per_worker`` records a second each keep up with
    ``writes`` to ``table`` on a stream of ``shards`` open shards (None: unknown, no bound);
    ``until``: what an unknown write rate waits for."""
    workers = max(1, workers)
    rate = max(per_worker.records_per_s or 0.0, 1e-9)
    at_once = min(workers, shards) if shards else workers
    capacity = rate * at_once
    team = f"{_workers(workers)}: {_n(capacity)}/s"
    if shards and workers > shards:
        team = f"{_workers(workers)}, {at_once} at once on {_stream_shards(shards)}: {_n(capacity)}/s"
    applies = f"capture applies about {_n(rate)} records/s per worker ({team})"
    basis = f"per worker: {per_worker.basis}"
    written = writes.records_per_s
    if written is None:
        text = f"the write rate of {table} is unknown{until} ({writes.basis}); {applies} ({basis})"
        return Check(table, UNKNOWN, False, None, writes.basis, rate, per_worker.basis, workers,
                     shards, capacity, None, True, text)
    wanted = written * HEADROOM
    head = f"{table} is written at about {_n(written)} records/s; {applies}"
    basis = f"write rate: {writes.basis}; {basis}"
    if capacity >= wanted:
        return Check(table, OK, False, written, writes.basis, rate, per_worker.basis, workers,
                     shards, capacity, None, True, f"{head} — ok ({basis})")
    status = TIGHT if capacity >= written else SHORT
    needed = max(1, math.ceil(wanted / rate))
    enough = shards is None or needed <= shards
    said = ("barely keeps up (a lag drains slowly)" if status == TIGHT else "cannot keep up")
    if enough:
        said += f": give --workers {needed} or more"
        if shards:
            said += (f" (the stream has {shards} shard{'s' if shards != 1 else ''}: more workers "
                     "than shards do not help)")
    else:
        assert shards is not None
        each = "on the stream's only shard" if shards == 1 else f"for each of the stream's {shards} shards"
        said += f" even with a worker {each} ({_n(rate * shards)}/s; more workers than shards do not help)"
        said += (f": give --workers {shards}, and" if workers < shards else ":")
        said += (" expect capture's lag to grow while writes stay this high" if status == SHORT
                 else " expect a lag to drain slowly")
    ceiling = 1 / CPU_S_PER_RECORD
    if wanted > ceiling:
        said += (f"; on threads of one process capture's client CPU (about "
                 f"{CPU_S_PER_RECORD * 1e6:.0f} µs a record) stops near {_n(ceiling)} records/s: "
                 "--dask spreads the shards over more processes")
    return Check(table, status, True, written, writes.basis, rate, per_worker.basis, workers,
                 shards, capacity, needed, enough, f"{head} — {said} ({basis})")


def per_worker_from_stats(stats: Mapping[str, Any] | None) -> float | None:
    """What one worker applied a second, from a capture's saved stats (``capture.Stats``), when
    it was measured at full speed: the mean rate of the shards still behind after the last
    round (their pages came full, so the worker never waited for writes); else the round's
    rate over the shards applied at once, when capture was not caught up. None otherwise: a
    caught-up capture's rate is the writes', not what it can do."""
    if not isinstance(stats, Mapping):
        return None
    shards = stats.get("shards")
    shards = shards if isinstance(shards, Mapping) else {}
    behind = [float(s["records_per_s"]) for s in shards.values()
              if isinstance(s, Mapping) and not s.get("done") and _number(s.get("lag_s")) > 0
              and _number(s.get("records_per_s")) > 0]
    if behind:
        return sum(behind) / len(behind)
    total = _number(stats.get("records_per_s"))
    if stats.get("caught_up") or total <= 0:
        return None
    live = sum(1 for s in shards.values() if isinstance(s, Mapping) and not s.get("done"))
    workers = max(1, int(_number(stats.get("workers")) or 1))
    return total / max(1, min(workers, live) if live else workers)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def estimated_per_worker(round_trip_s: float) -> float:
    """Records a second one worker applies when each page of ``capture.PAGE_RECORDS`` records
    costs ``ROUND_TRIPS`` round trips plus ``CPU_S_PER_RECORD`` of client CPU a record."""
    from tsmigrate.rewrite.capture import PAGE_RECORDS

    return PAGE_RECORDS / (ROUND_TRIPS * max(0.0, round_trip_s) + PAGE_RECORDS * CPU_S_PER_RECORD)


# -- reading the instance ------------------------------------------------------------------------


def round_trip_s(raw: Any, table: str) -> float:
    """The fastest of a few small requests (ListStream of ``table``): one round trip."""
    from tablestore.error import OTSServiceError

    best = math.inf
    for _ in range(ROUND_TRIP_TRIES):
        started = time.perf_counter()
        with contextlib.suppress(OTSServiceError):  # an error's answer is a round trip too
            raw.list_streams(table)
        best = min(best, time.perf_counter() - started)
    return best


def measured_per_worker(client: Any, prefer: str | None = None) -> Rate | None:
    """What capture applied per worker on this instance, from the rewrites' saved stats
    (forward and reverse capture; the late-write net reads both tables and is left out): the
    rewrite into ``prefer``'s own, else the most recently saved one."""
    found = []
    for rewrite in machine.all_rewrites(client):
        for key, at_key, label in (
                ("capture_stats", "capture_at_ms", f"capture of {rewrite.source} into {rewrite.target}"),
                ("reverse_stats", "reverse_at_ms",
                 f"reverse capture of {rewrite.target} into {rewrite.source}")):
            rate = per_worker_from_stats(rewrite.get(key))
            if rate:
                at_ms = _number(rewrite.get(at_key))
                found.append((rewrite.target == prefer, at_ms, rate, label))
    if not found:
        return None
    _, _, rate, label = max(found, key=lambda f: (f[0], f[1]))
    return Rate(rate, f"measured by {label} on this instance, while it was behind")


def per_worker(client: Any, raw: Any, table: str, prefer: str | None = None) -> Rate:
    """What capture applies per worker: stated (``PER_WORKER_RECORDS_S``), else measured on
    this instance, else estimated from a round trip."""
    if PER_WORKER_RECORDS_S is not None:
        return Rate(PER_WORKER_RECORDS_S, "stated")
    measured = measured_per_worker(client, prefer)
    if measured is not None:
        return measured
    from tsmigrate.rewrite.capture import PAGE_RECORDS

    rtt = round_trip_s(raw, table)
    return Rate(estimated_per_worker(rtt), (
        f"estimated from a {rtt * 1000:.1f} ms round trip ({ROUND_TRIPS} a page of {PAGE_RECORDS} "
        f"records) and {CPU_S_PER_RECORD * 1e6:.0f} µs of client CPU a record; no capture "
        "measured one here yet"))


@attrs.define
class _Shard:
    shard_id: str
    iterator: str | None
    at_end: bool = False  # a page came short: the window counts what arrives from here
    opened: float = 0.0  # when (monotonic) its window opened
    arrived: int = 0
    closed: float = 0.0
    newest: list[int] = attrs.field(factory=list)  # record times of the last page read


def _record_ms(row: bytes) -> int | None:
    """A stream record's time: the newest timestamp of its cells (None: a record without any,
    a row delete)."""
    from tsmigrate.contract.rowbytes import row_cells

    try:
        _key, cells, _values = row_cells(row)
    except ValueError:
        return None
    return max((c[1] for c in cells if c[1]), default=None)


def _skip(raw: Any, shard: _Shard) -> _Shard:
    """Read ``shard`` up to ``SKIP_PAGES`` pages towards its newest record."""
    for _ in range(SKIP_PAGES):
        if shard.iterator is None:
            break
        page, following = raw.stream_record_bytes(shard.iterator, SAMPLE_PAGE)
        shard.iterator = following
        if len(page) < SAMPLE_PAGE:
            shard.at_end = True
            shard.opened = time.monotonic()
            break
        shard.newest = [t for t in (_record_ms(row) for _action, row, _origin in page) if t]
    return shard


def _drain(raw: Any, shard: _Shard) -> _Shard:
    """Count what arrived on ``shard`` since its window opened (at most ``DRAIN_PAGES`` pages)."""
    for _ in range(DRAIN_PAGES):
        if shard.iterator is None:
            break
        page, shard.iterator = raw.stream_record_bytes(shard.iterator, SAMPLE_PAGE)
        shard.arrived += len(page)
        if len(page) < SAMPLE_PAGE:
            break
    shard.closed = time.monotonic()
    return shard


def _backlog_rate(shard: _Shard) -> float | None:
    """A shard whose newest records were out of reach: its rate from the cell times of the
    newest page read (when those records were written; None when their times do not tell)."""
    times = sorted(shard.newest)
    if len(times) < 2 or times[-1] - times[0] < 50:
        return None
    return (len(times) - 1) / ((times[-1] - times[0]) / 1000)


def sample_writes(raw: Any, table: str, seconds: float,
                  start: Mapping[str, Any] | None = None) -> Rate:
    """The records a second written to ``table`` lately, from its stream: the records arriving on
    every open shard within ``seconds``, read from ``start`` (a capture position: where capture
    starts) or else each shard's start, saving nothing.

    A shard is first read towards its newest record (at most ``SKIP_PAGES`` pages: a stream
    that was on before holds a backlog); the window opens once a page comes short. A shard whose
    backlog is longer than that cannot reach its newest records in a bounded read (there is no
    iterator at a time): its rate comes from the cell times of the newest page it reached, which
    say when those records were written (cells a writer stamped itself may not; such a shard
    counts as the others' mean)."""
    from tablestore.error import OTSServiceError

    try:
        streams = raw.list_streams(table)
    except OTSServiceError as exc:
        if exc.code != "OTSObjectNotExist":
            raise
        return Rate(None, f"{table} does not exist yet")
    if not streams:
        return Rate(None, "its stream is off")
    stream_id = streams[0][0]
    described = raw.describe_shards(stream_id)
    parents = {p for s in described for p in (s.parent_id, s.parent_sibling_id) if p}
    kept = (start or {}).get("shards") if (start or {}).get("stream_id") == stream_id else None
    kept = kept if isinstance(kept, Mapping) else {}
    shards = []
    for shard in described:
        if shard.shard_id in parents:
            continue  # closed: its children take its keys' writes
        saved = kept.get(shard.shard_id) or {}
        iterator = saved.get("iterator") or raw.shard_iterator(stream_id, shard.shard_id)
        shards.append(_Shard(shard.shard_id, iterator))
    with cf.ThreadPoolExecutor(max(1, min(SAMPLE_THREADS, len(shards))),
                               thread_name_prefix="write-sample") as pool:
        shards = list(pool.map(lambda s: _skip(raw, s), shards))
        live = [s for s in shards if s.at_end]
        if live:
            time.sleep(seconds)
            live = list(pool.map(lambda s: _drain(raw, s), live))
    rates = [s.arrived / max(s.closed - s.opened, 1e-3) for s in live]
    behind = [s for s in shards if not s.at_end]
    rates += [r for r in (_backlog_rate(s) for s in behind) if r is not None]
    count = len(shards)
    if not rates:
        return Rate(None, f"its stream holds more than {SKIP_PAGES * SAMPLE_PAGE:,} records on each "
                          "shard and their cell times do not tell when they were written", count)
    total = sum(rates) * count / len(rates)
    basis = f"sampled from its stream for {seconds:g} s on {count} shard{'s' if count != 1 else ''}"
    if behind:
        basis += (f"; {len(behind)} held over {SKIP_PAGES * SAMPLE_PAGE:,} records: their rate "
                  "from the cell times of the newest records reached")
    return Rate(total, basis, count)


def for_prepare(client: Any, raw: Any, rewrite: machine.Rewrite, workers: int) -> tuple[Rate, Check]:
    """Prepare's measurement, with the stream on and capture's start saved: the write rate from
    where capture starts, and the verdict for ``workers`` workers."""
    try:
        writes = sample_writes(raw, rewrite.source, SAMPLE_S, rewrite.get("capture"))
    except (ts.OTSServiceError, ts.OTSClientError, OSError) as exc:
        # A figure for a warning: its failure never stops the rewrite
        writes = Rate(None, f"its stream could not be sampled ({getattr(exc, 'message', exc)})")
    rate = per_worker(client, raw, rewrite.source, rewrite.target)
    return writes, decide(rewrite.source, writes, rate, workers, writes.shards, until="")


def saved_writes(rewrite: machine.Rewrite) -> Rate | None:
    """The write rate the rewrite's prepare measured, as it saved it."""
    saved = rewrite.get("source_writes")
    if not isinstance(saved, Mapping) or saved.get("records_per_s") is None:
        return None
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(_number(saved.get("at_ms")) / 1000))
    return Rate(float(saved["records_per_s"]), f"{saved.get('basis')}, by this rewrite's prepare "
                f"at {when}", saved.get("shards"))


def for_plan(client: Any, source: str, target: str, workers: int,
             rewrite: machine.Rewrite | None = None) -> Check:
    """Plan's verdict (fast: no sample unless the stream is on): the write rate the rewrite in
    progress measured, else a short sample when the source's stream is on, else unknown."""
    from tsmigrate.instance.rawclient import RawClient

    raw = RawClient(client)
    writes = saved_writes(rewrite) if rewrite is not None else None
    if writes is None:
        writes = sample_writes(raw, source, SAMPLE_S / 2)
    rate = per_worker(client, raw, source, target)
    return decide(source, writes, rate, workers, writes.shards)


def with_checks(client: Any, plan: Any, workers: int) -> Any:
    """``plan`` with each rewrite it shows (its rewrite_table steps, the rewrites apply starts or
    continues) given its capture check (``capture``)."""
    from tsmigrate.planning import ops

    steps = [attrs.evolve(s, capture=for_plan(client, s.source, s.table, workers))
             if isinstance(s, ops.RewriteTable) else s for s in plan.steps]
    ahead = []
    for item in plan.rewrites:
        # apply continues a rewrite with its own --workers (run_to_ready saves them)
        rewrite = machine.load(client, item.table) if item.phase is not None else None
        ahead.append(attrs.evolve(item, capture=for_plan(client, item.source, item.table, workers,
                                                         rewrite)))
    return attrs.evolve(plan, steps=steps, rewrites=ahead)


Report = Callable[[str, dict[str, Any]], None]


def announcing(runner: machine.Runner, report: Report) -> Report:
    """``report``, also telling (event ``capacity``, once) the verdict prepare saved on the
    rewrite, as the phase after prepare starts."""
    told = [False]

    def forward(event: str, data: dict[str, Any]) -> None:
        if event == "phase" and not told[0] and data.get("phase") != machine.PREPARE:
            check = runner.rewrite.get("capture_capacity")
            if isinstance(check, Mapping) and check.get("text"):
                told[0] = True
                report("capacity", dict(check))
        report(event, data)

    return forward
