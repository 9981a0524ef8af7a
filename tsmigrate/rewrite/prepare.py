"""Prepare a rewrite: everything that must be true before the first row is copied.

0. The two tables' live options are checked against what the rewrite and its cut-over need
   (``shapes.problems``, as plan checked the models): a table changed by hand since stops the
   rewrite here, with the fix, before anything is written.
1. The transform is tried on a sample of source rows (read calls only): a row it cannot map
   stops the rewrite here, naming the source key, before anything is written. The sample's
   read-and-transform rate projects how long the copy and verification take: a rewrite that
   could outlive the records of the source's stream (as this phase leaves it) stops here too
   (``cost.check_stream``).
2. The target (created by the plan's ``create_table`` step, with its new key, options and
   indexes) is refused when it holds rows that no rewrite wrote.
3. The target's ``max_time_deviation`` is widened so that cells keep their original timestamps
   (TTL keeps counting from the original write); finish sets the declared value back.
4. The source's stream is turned on if it is off, carrying the key-source columns' values from
   before each write (origin columns), so capture can delete the old target row of a row whose
   new key changed; what the stream was is recorded so finish and abort can put it back.
5. Where capture starts is recorded before the copy: an iterator at the oldest record of every
   shard. Records older than the copy are harmless (capture re-reads the source row).
6. How fast the source is written is sampled from its stream, from where capture starts, and
   compared with what capture applies per worker (``capacity``): the figures and the verdict
   for ``--workers`` (``source_writes``, ``capture_capacity``), a warning that apply and
   ``rewrite status`` show when the workers cannot keep up.
7. The source's key ranges (split points) are computed once and kept for the backfill.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import tablestore as ts

from tsmigrate.instance import adapter
from tsmigrate.instance.rawclient import RawClient
from tsmigrate.rewrite import machine
from tsmigrate.rewrite.job import ConnectionSpec, RewriteJob
from tsmigrate.schema import NO_TTL, StreamSpec, Table
from tsmigrate.schema.validate import MAX_STREAM_HOURS

if TYPE_CHECKING:
    from tsmigrate.rewrite.copy import Sample
    from tsmigrate.rewrite.cost import Projection
    from tsmigrate.rewrite.splits import Split

STREAM_HOURS = MAX_STREAM_HOURS  # the longest the service keeps records: room for a long backfill
MAX_DEVIATION_S = (2**63 - 1) // 1_000_000  # the service's upper bound
SAMPLE_ROWS = 200


class TargetNotEmpty(machine.RewriteError):
    """The target table already holds rows that did not come from this rewrite."""


def wide_deviation(source: Table, declared: int) -> int:
    """A max_time_deviation that accepts every cell the source can still hold: its TTL (cells
    older than that are gone) plus a day, or the service's maximum when it keeps data forever."""
    if source.options.time_to_live == NO_TTL:
        return MAX_DEVIATION_S
    return max(declared, source.options.time_to_live + 86400)


def target_has_rows(client: Any, table: str, key_names: tuple[str, ...]) -> bool:
    start = [(name, ts.INF_MIN) for name in key_names]
    end = [(name, ts.INF_MAX) for name in key_names]
    _consumed, _next, rows, _token = client.get_range(
        table, ts.Direction.FORWARD, start, end, limit=1, max_version=1
    )
    return bool(rows)


def set_deviation(client: Any, table: Table, deviation: int) -> None:
    options = attrs.evolve(table.options, max_time_deviation=deviation)
    client.update_table(table.name, table_options=adapter.sdk_options(options))


def enable_stream(raw: RawClient, source: str, origin_columns: list[str]) -> dict[str, Any]:
    """Turn the source's stream on (with ``origin_columns``); returns what it was before."""
    details = raw.describe_table(source).stream_details
    was = {
        "enabled": bool(details.enable_stream),
        "expiration_hours": int(details.expiration_time) if details.enable_stream else None,
        "origin_columns": RawClient.origin_columns(details) if details.enable_stream else [],
    }
    wanted = sorted(set(was["origin_columns"]) | set(origin_columns))
    if not was["enabled"] or wanted != was["origin_columns"]:
        raw.update_stream(source, True, was["expiration_hours"] or STREAM_HOURS,
                          origin_columns=wanted)
    return was


def restore_stream(raw: RawClient, source: str, was: dict[str, Any]) -> None:
    """Put the source's stream back as prepare found it."""
    if not was.get("enabled"):
        raw.update_stream(source, False)
    elif was.get("origin_columns") is not None:
        raw.update_stream(source, True, was["expiration_hours"],
                          origin_columns=was["origin_columns"])


def capture_start(raw: RawClient, source: str) -> dict[str, Any]:
    """The capture position before the copy: every shard from its oldest record."""
    (stream_id, _table, _created), *_ = raw.list_streams(source)
    shards = {}
    for shard in raw.describe_shards(stream_id):
        shards[shard.shard_id] = {
            "iterator": raw.shard_iterator(stream_id, shard.shard_id),
            "parents": [p for p in (shard.parent_id, shard.parent_sibling_id) if p],
            "done": False,
        }
    return {"stream_id": stream_id, "shards": shards}


def projection(job: RewriteJob, kept: Sequence[Split], sampled: Sample,
               workers: int) -> Projection | None:
    """How long the copy and verification of ``kept`` should take at the rate ``sampled`` was
    read and transformed (None when the sample read nothing). The sample reads the ranges one
    after another and the copy runs ``workers`` of them at once; ``job.max_rows_per_s``
    (``--max-rows-per-s``) caps the rate, at the sample's bytes a row."""
    from tsmigrate.rewrite.cost import MB, Projection

    rate = sampled.bytes_per_s
    if rate is None:
        return None
    at_once = max(1, min(workers, len(kept)))
    size = sum(s.estimated_bytes for s in kept)
    row_bytes = sampled.bytes / sampled.rows
    if job.max_rows_per_s and job.max_rows_per_s * row_bytes < rate * at_once:
        return Projection(size, job.max_rows_per_s * row_bytes,
                          f"at --max-rows-per-s {job.max_rows_per_s:g} (about "
                          f"{row_bytes:,.0f} bytes a row)", row_limit=job.max_rows_per_s)
    times = f" x {at_once} workers" if at_once > 1 else ""
    return Projection(size, rate * at_once,
                      f"at {rate / MB:.3g} MB/s{times} (measured on {sampled.rows} sample rows, "
                      "read and transformed)")


def check_stream_window(raw: RawClient, job: RewriteJob, kept: Sequence[Split], sampled: Sample,
                        workers: int) -> None:
    """Raise cost.StreamTooShort when the copy and verification could outlive the records of
    the source's stream as prepare leaves it (read calls only: nothing is written yet)."""
    from tsmigrate.rewrite import cost

    projected = projection(job, kept, sampled, workers)
    if projected is None:
        return
    details = raw.describe_table(job.source.name).stream_details
    stream = (StreamSpec(True, int(details.expiration_time)) if details.enable_stream
              else StreamSpec())
    cost.check_stream(job.source.name, job.target.name, projected, stream,
                      "then apply again (the rewrite continues from prepare), or drop the new "
                      f"table with tsmigrate rewrite abort {job.target.name}")


def live_options(raw: RawClient, table: Table) -> Table:
    """``table`` with the options the service has for it now (changed by hand, perhaps)."""
    return attrs.evolve(table, options=adapter.ir_table(raw.describe_table(table.name), []).options)


def check_live_shapes(raw: RawClient, job: RewriteJob) -> None:
    """Raise shapes.RewriteShapeError when the two tables' live options (what plan checked in
    the models, or changed by hand since) are ones the rewrite cannot work with. Read calls only."""
    from tsmigrate.contract import shapes

    shapes.check(live_options(raw, job.source), live_options(raw, job.target), job.custom)


def measure_capacity(client: Any, raw: RawClient, runner: machine.Runner, workers: int) -> machine.Rewrite:
    """Sample the source's write rate from its stream (from where capture starts, saving
    nothing; ``capacity.SAMPLE_S``) and save it with the verdict for ``workers`` workers."""
    from tsmigrate.rewrite import capacity

    writes, check = capacity.for_prepare(client, raw, runner.rewrite, workers)
    return runner.save(source_writes={"records_per_s": writes.records_per_s, "basis": writes.basis,
                                      "shards": writes.shards, "at_ms": machine.now_ms()},
                       capture_capacity=check.to_dict())


def prepare(client: Any, spec: ConnectionSpec, runner: machine.Runner, job: RewriteJob,
            workers: int = 1) -> None:
    """Run the prepare phase (each step is safe to run again after a crash), then move the
    rewrite to backfill."""
    from tsmigrate.contract import transform
    from tsmigrate.rewrite import copy, splits

    rewrite = runner.rewrite
    raw = RawClient(client)
    check_live_shapes(raw, job)
    kept = splits.plan(client, job.id, job.source, workers)  # the job's ranges, kept once
    sampled = copy.sample(spec, job, SAMPLE_ROWS, client=client, ranges=kept)
    check_stream_window(raw, job, kept, sampled, workers)
    if not rewrite.get("target_checked"):
        if target_has_rows(client, job.target.name, job.target.primary_key_names):
            raise TargetNotEmpty(
                f"table {job.target.name} already exists with rows that no rewrite of "
                f"{job.source} wrote; drop it (or declare another table name) and apply again"
            )
        rewrite = runner.save(target_checked=True)
    if "declared_deviation" not in rewrite.doc:
        declared = job.target.options.max_time_deviation
        rewrite = runner.save(declared_deviation=declared)
        set_deviation(client, job.target, wide_deviation(job.source, declared))
    if "stream_was" not in rewrite.doc:
        key_sources = sorted(transform.build(job).key_sources)
        was = enable_stream(raw, job.source.name, key_sources)
        rewrite = runner.save(stream_was=was)
    if "capture" not in rewrite.doc:
        # No record has touched a split yet: verification may take their copies' totals.
        rewrite = runner.save(capture=capture_start(raw, job.source.name), touched_splits=[])
    if "capture_capacity" not in rewrite.doc:
        rewrite = measure_capacity(client, raw, runner, workers)
    if "estimate" not in rewrite.doc:
        rewrite = runner.save(estimate={"bytes": sum(s.estimated_bytes for s in kept),
                                        "splits": len(kept)})
    runner.save(phase=machine.BACKFILL, backfill_started_ms=machine.now_ms())
