"""What the driver, status and the cut-over share about the two sides of a rewrite: the heartbeat
rows of the processes routing it (``tsmigrate.service.routing``), and reverse capture (the
target's changes applied to the source once services write the target). Below ``driver`` and
``cutover``, so neither imports the other.
"""

from __future__ import annotations

import contextlib
from typing import Any

import attrs

from tsmigrate.instance import adapter
from tsmigrate.instance.state import STATE_TABLE
from tsmigrate.rewrite import capture as capture_mod
from tsmigrate.rewrite import machine
from tsmigrate.rewrite.job import RewriteJob
from tsmigrate.service import routing

LIVE_S = 60.0  # heartbeats this recent are listed (status) as processes routing the rewrite


def clients(client: Any, target: str) -> list[dict[str, Any]]:
    """The heartbeat rows of processes routing the rewrite into ``target``."""
    with contextlib.suppress(Exception):
        rows = adapter.scan_prefix(client, STATE_TABLE, ("kind", routing.CLIENT_KIND), "id")
        return [{"id": str(key).partition("/")[2], **columns} for key, columns in rows
                if str(key).startswith(f"{target}/")]
    return []


def forget_clients(client: Any, target: str) -> None:
    """Remove the heartbeat rows of an ended rewrite (finish, abort): nothing waits for them."""
    for row in clients(client, target):
        with contextlib.suppress(Exception):
            adapter.delete_row(client, STATE_TABLE,
                               [("kind", routing.CLIENT_KIND), ("id", f"{target}/{row['id']}")])


def live_clients(client: Any, target: str) -> list[dict[str, Any]]:
    now = machine.now_ms()
    return [c for c in clients(client, target) if now - int(c.get("at_ms", 0)) < LIVE_S * 1000]


# --- reverse capture: the target's changes applied to the source ------------------------------


def reverse_job(job: RewriteJob) -> RewriteJob:
    return RewriteJob(id=f"{job.id}-reverse", source=job.target, target=job.source,
                      created_ms=job.created_ms)


def make_reverse_capture(client: Any, rewrite: machine.Rewrite) -> capture_mod.Capture:
    from tsmigrate.rewrite import transform, writer

    job = reverse_job(machine.job_of(rewrite))
    return capture_mod.Capture(
        client, job, transform.RowTransform.build(job.source, job.target,
                                                  default_timestamp=job.created_ms),
        rewrite.doc["reverse_capture"], split_of=lambda _key: 0, split_done=lambda _index: True,
        writer=writer, touched=None,
    )


def save_reverse(runner: machine.Runner, capture: capture_mod.Capture, *,
                 stopped_by: str | None = None, **extra: Any) -> machine.Rewrite:
    """Save reverse capture's position, stats, lag and when (``reverse_at_ms``); ``stopped_by``:
    the error that stopped it (``reverse_error``; a save without one is progress, which clears
    it). Its own keys: forward capture's lag and error stay forward capture's."""
    return runner.save(reverse_capture=capture.position(), reverse_lag_s=round(capture.lag_s(), 3),
                       reverse_stats=attrs.asdict(capture.stats), reverse_at_ms=machine.now_ms(),
                       reverse_error=stopped_by, **extra)
