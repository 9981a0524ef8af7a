"""What a planned rewrite will cost, for ``tsmigrate plan``: the data to copy from the source's
split points (ComputeSplitPointsBySize, a read call), and the time at a stated rate.

And whether the source's stream keeps its records that long: capture keeps its place at a record
until the split the record falls in has been copied, so a record written as the copy starts must
still be in the stream when the copy and its verification end. Plan (at the stated rate) and
prepare (at the rate it measures on its sample) refuse a rewrite whose projected copy and
verification take more than ``STREAM_MARGIN`` of the stream's expiration (``check_stream``).
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from tsmigrate import ops
from tsmigrate.plan import Plan
from tsmigrate.rewrite import machine, prepare
from tsmigrate.schema import Catalog, StreamSpec, physical
from tsmigrate.validate import MAX_STREAM_HOURS

# The copy rate the estimate assumes, stated in every output (bench/rewrite.py measures yours).
RATE_MB_S = 20.0
MB = 1024 * 1024

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
    stream that is off is turned on for ``prepare.STREAM_HOURS``."""
    return stream if stream.enabled else StreamSpec(True, prepare.STREAM_HOURS)


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


def with_costs(client: Any, plan: Plan, rate_mb_s: float | None = None,
               live: Catalog | None = None) -> Plan:
    """``plan`` with every rewrite_table step's cost estimated from the live source. With the
    ``live`` catalog the plan was made from, a rewrite that could outlive its source's stream
    records (the stream as the steps before it leave it) raises StreamTooShort."""
    from tsmigrate.rewrite import splits

    rate = rate_mb_s or RATE_MB_S  # read at the call: tests lower the module's rate
    state = physical(live) if live is not None else None
    steps = []
    for step in plan.steps:
        if isinstance(step, ops.RewriteTable):
            size = splits.estimate(client, step.source)
            step = attrs.evolve(step, cost=ops.RewriteCost(size.bytes, size.splits, rate))
            source = state.table(step.source) if state is not None else None
            if source is not None:
                check_stream(step.source, step.table, stated(size.bytes, rate), source.stream,
                             "then plan again")
        if state is not None:
            state = ops.transform(state, step)
        steps.append(step)
    return attrs.evolve(plan, steps=steps)
