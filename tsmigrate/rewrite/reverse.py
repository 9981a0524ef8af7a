"""What the driver, status and the cut-over share about the two sides of a rewrite: the heartbeat
rows of the processes routing it (``tsmigrate.service.routing``), and reverse capture (the
target's changes applied to the source once services write the target). Below ``driver`` and
``cutover``, so neither imports the other.
"""

from __future__ import annotations

import contextlib
from typing import Any

import attrs

from tsmigrate.contract.staterow import CLIENT_KIND, RewriteJob
from tsmigrate.instance import adapter, clock
from tsmigrate.instance.state import STATE_TABLE
from tsmigrate.rewrite import capture as capture_mod
from tsmigrate.rewrite import machine, shards

LIVE_S = 60.0  # heartbeats this recent are listed (status) as processes routing the rewrite


def clients(client: Any, target: str, *, now_ms: int | None = None) -> list[dict[str, Any]]:
    """The heartbeat rows of processes routing the rewrite into ``target``, each with ``age_s``:
    how long ago the service wrote it, by the service's own clock (its cells' timestamps against
    ``now_ms``, the service's time now; by default ``clock.server_now_ms``, or when that probe
    cannot be written, the newest heartbeat's time, which is never ahead of it). No host's clock
    is compared with another's: a client 10 s behind or ahead is as old as it is. ``at_ms``, the
    process's own clock when it wrote the row, is kept as information."""
    with contextlib.suppress(Exception):
        rows = [(key, columns, stamps) for key, columns, stamps in
                clock.scan_stamped(client, STATE_TABLE, ("kind", CLIENT_KIND), "id")
                if str(key).startswith(f"{target}/")]
        if rows and now_ms is None:
            try:
                now_ms = clock.server_now_ms(client)
            except Exception:  # a read-only key: the newest heartbeat is a bound of the time
                now_ms = max(max(stamps.values(), default=0) for _key, _columns, stamps in rows)
        return [{"id": str(key).partition("/")[2], **columns,
                 "age_s": round((int(now_ms or 0) - max(stamps.values(), default=0)) / 1000, 3)}
                for key, columns, stamps in rows]
    return []


def forget_clients(client: Any, target: str) -> None:
    """Remove the heartbeat rows of an ended rewrite (finish, abort): nothing waits for them."""
    for row in clients(client, target, now_ms=0):  # their age does not matter
        with contextlib.suppress(Exception):
            adapter.delete_row(client, STATE_TABLE,
                               [("kind", CLIENT_KIND), ("id", f"{target}/{row['id']}")])


def live_clients(client: Any, target: str, *, now_ms: int | None = None) -> list[dict[str, Any]]:
    """``clients`` whose heartbeat the service wrote less than ``LIVE_S`` ago (its clock)."""
    return [c for c in clients(client, target, now_ms=now_ms) if c["age_s"] < LIVE_S]


# --- reverse capture: the target's changes applied to the source ------------------------------


def reverse_job(job: RewriteJob) -> RewriteJob:
    return RewriteJob(id=f"{job.id}-reverse", source=job.target, target=job.source,
                      created_ms=job.created_ms)


def make_reverse_capture(client: Any, rewrite: machine.Rewrite,
                         runner: shards.ShardRunner | None = None) -> capture_mod.Capture:
    from tsmigrate.contract import transform
    from tsmigrate.rewrite import writer

    job = reverse_job(machine.job_of(rewrite))
    capture = capture_mod.Capture(
        client, job, transform.RowTransform.build(job.source, job.target,
                                                  default_timestamp=job.created_ms),
        rewrite.doc["reverse_capture"], split_of=lambda _key: 0, split_done=lambda _index: True,
        writer=writer, touched=None,
    )
    return shards.attach(capture, rewrite, "tsmigrate.rewrite.reverse:make_reverse_capture", job.id, runner)


def save_reverse(runner: machine.Runner, capture: capture_mod.Capture, *,
                 stopped_by: str | None = None, **extra: Any) -> machine.Rewrite:
    """Save reverse capture's position, stats, lag and when (``reverse_at_ms``); ``stopped_by``:
    the error that stopped it (``reverse_error``; a save without one is progress, which clears
    it). Its own keys: forward capture's lag and error stay forward capture's."""
    return runner.save(reverse_capture=capture.position(), reverse_lag_s=round(capture.lag_s(), 3),
                       reverse_stats=attrs.asdict(capture.stats), reverse_at_ms=machine.now_ms(),
                       reverse_error=stopped_by, **extra)
