"""What a rewrite looks like from outside: the status (``tsmigrate rewrite status``, text and
JSON, read from ``tsmigrate_state`` alone) and the live progress bar ``apply`` shows."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from tsmigrate.rewrite import machine

NEXT_STEP = {
    machine.PREPARE: "tsmigrate apply continues it",
    machine.BACKFILL: "tsmigrate apply continues it",
    machine.CATCH_UP: "tsmigrate apply continues it",
    machine.READY: "deploy services on the new model (in any order; the model API writes {s} "
                   "until the switch) while `tsmigrate rewrite follow {t}` keeps capture running, "
                   "then `tsmigrate rewrite switch {t}`",
    machine.SWITCHING: "writes are held: tsmigrate rewrite switch {t} (or revert) completes it",
    machine.SWITCHED: "watch the services; `tsmigrate rewrite revert {t}` goes back to {s}, "
                      "`tsmigrate rewrite finish {t}` ends the rewrite",
    machine.REVERTING: "writes are held: tsmigrate rewrite revert {t} (or switch) completes it",
    machine.FINISHING: "tsmigrate rewrite finish {t} completes it",
    machine.PAUSED: "tsmigrate rewrite resume {t}",
    machine.FAILED: "fix the cause above, then tsmigrate apply (or tsmigrate rewrite resume {t})",
    machine.DONE: "nothing: services use {t}",
    machine.ABORTED: "nothing: the target was dropped, the source left as it was",
}


def next_step(rewrite: machine.Rewrite) -> str:
    return NEXT_STEP[rewrite.phase].format(t=rewrite.target, s=rewrite.source)


def status_data(client: Any, rewrite: machine.Rewrite) -> dict[str, Any]:
    """The status of one rewrite: phase, rows copied / estimated, rows/s, ETA, capture lag,
    collisions, verification, and what to do next."""
    from tsmigrate.rewrite import checkpoints

    job = machine.job_of(rewrite)
    done = checkpoints.list_splits(client, job.id) if rewrite.phase != machine.ABORTED else []
    rows = sum(c.rows for c in done)
    copied_bytes = sum(c.bytes for c in done)
    estimate = rewrite.get("estimate") or {}
    est_bytes = int(estimate.get("bytes", 0))
    est_rows = rows
    if copied_bytes and est_bytes > copied_bytes:
        est_rows = int(rows * est_bytes / copied_bytes)
    backfill = rewrite.get("backfill") or {}
    backfill_done = bool(backfill)
    if backfill_done:  # the backfill's own rate, not diluted by the time since
        rate = backfill["rows"] / max(1e-3, backfill.get("elapsed_s", 0))
    else:
        started = int(rewrite.get("backfill_started_ms") or machine.now_ms())
        rate = rows / max(1e-3, (machine.now_ms() - started) / 1000) if rows else 0.0
    eta_s = 0.0 if backfill_done else ((est_rows - rows) / rate if rate else None)
    verification = rewrite.get("verification") or {}
    return {
        "target": rewrite.target,
        "source": rewrite.source,
        "phase": rewrite.phase,
        "resume_to": rewrite.resume_to if rewrite.phase in (machine.PAUSED, machine.FAILED) else None,
        "error": rewrite.error or None,
        "rows_copied": rows,
        "rows_estimated": max(est_rows, rows),
        "bytes_copied": copied_bytes,
        "splits": {"total": int(estimate.get("splits", len(done))),
                   "done": sum(c.done for c in done),
                   "running": sum(not c.done for c in done)},
        "rows_per_s": round(rate, 1),
        "eta_s": None if eta_s is None else round(eta_s, 1),
        "capture_lag_s": rewrite.get("capture_lag_s"),
        "capture": rewrite.get("capture_stats") or {},
        "collisions": verification.get("collisions", []),
        "verification": verification or None,
        "runner": (rewrite.get("runner") or {}).get("owner"),
        "updated": _when(rewrite.get("updated_ms")),
        "side": rewrite.side,
        "fence": rewrite.get("fence"),
        "clients": _clients(client, rewrite),
        "next": next_step(rewrite),
    }


def _clients(client: Any, rewrite: machine.Rewrite) -> list[dict[str, Any]]:
    """Processes routing this rewrite (heartbeats of the last minute): where each writes."""
    from tsmigrate.rewrite import cutover

    if not rewrite.active:
        return []
    return [{"host": c.get("host"), "pid": c.get("pid"), "table": c.get("table"),
             "side": c.get("side"), "phase": c.get("phase"), "seen": _when(c.get("at_ms"))}
            for c in cutover.live_clients(client, rewrite.target)]


def _when(ms: Any) -> str | None:
    if not ms:
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(ms) / 1000))


def status_text(data: dict[str, Any]) -> str:
    lines = [f"{data['source']} -> {data['target']}: {data['phase']}"
             + (f" (resumes at {data['resume_to']})" if data["resume_to"] else "")]
    if data["error"]:
        lines.append(f"  error: {data['error']}")
    splits = data["splits"]
    eta = "-" if data["eta_s"] is None else f"{data['eta_s']:.0f}s"
    lines.append(f"  rows copied: {data['rows_copied']:,} of about {data['rows_estimated']:,} "
                 f"({splits['done']}/{splits['total']} splits done), {data['rows_per_s']:,.0f} rows/s, "
                 f"ETA {eta}")
    lag = data["capture_lag_s"]
    stats = data["capture"]
    lines.append(f"  capture lag: {'-' if lag is None else f'{lag:.1f}s'}"
                 + (f" (applied {stats.get('applied', 0):,}, re-synced {stats.get('resynced', 0):,}, "
                    f"moved {stats.get('moved', 0):,})" if stats else ""))
    verification = data["verification"]
    if verification:
        state = "ok" if verification.get("ok") else "FAILED"
        lines.append(f"  verification: {state}"
                     + (f", {verification['changed_meanwhile']} row(s) changed meanwhile"
                        if verification.get("changed_meanwhile") else "")
                     + (f", source totals of {verification['splits_from_copy']} unchanged "
                        "split(s) from their copy" if verification.get("splits_from_copy") else ""))
        for key in verification.get("first_differences", []):
            lines.append(f"    differs: {key}")
    else:
        lines.append("  verification: not yet")
    if data["collisions"]:
        lines.append(f"  collisions: {len(data['collisions'])}")
        lines += [f"    {c}" for c in data["collisions"]]
    lines.append(f"  writes of the model API go to: {_side_text(data)}")
    fence = data.get("fence")
    if fence:
        lines.append(f"  last fence: to the {fence.get('to')}, writes held {fence.get('held_ms', 0)} ms"
                     + (f", {len(fence['unacknowledged'])} client(s) did not acknowledge"
                        if fence.get("unacknowledged") else ""))
    for c in data.get("clients") or ():
        lines.append(f"    client {c['host']}:{c['pid']} ({c['table']}): {c['side']}, "
                     f"saw {c['phase']} at {c['seen']}")
    if data["runner"]:
        lines.append(f"  run by: {data['runner']}")
    lines.append(f"  next: {data['next']}")
    return "\n".join(lines)


def _side_text(data: dict[str, Any]) -> str:
    side = data.get("side")
    if side == machine.HOLD:
        return "nowhere: held while the fence is up"
    return data["source"] if side == machine.SOURCE else data["target"]


class ApplyProgress:
    """The report callback apply gives a rewrite: a rich progress bar during the backfill
    (rows, rows/s, ETA, splits running and done), then capture lag and verification lines."""

    def __init__(self, console: Console):
        self.console = console
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        if event == "phase":
            self._stop()
            self.console.print(f"[bold]rewrite:[/] {data['phase']}")
        elif event == "backfill":
            self._backfill(data["progress"])
        elif event == "verify":
            self._stop()
            self.console.print("verification: " + ("[green]ok[/]" if data["ok"] else
                                                   "[yellow]differences, re-checking[/]"))

    def _backfill(self, progress: Any) -> None:
        if self.bar is None:
            self.bar = Progress(
                TextColumn("{task.description}"), BarColumn(),
                TextColumn("{task.completed:,.0f}{task.fields[of]} rows"),
                TextColumn("{task.fields[rate]:,.0f} rows/s"), TextColumn("{task.fields[splits]}"),
                TimeElapsedColumn(), TimeRemainingColumn(), console=self.console, transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("backfill", total=None, rate=0.0, splits="", of="")
        assert self.task is not None
        checkpoints = list(getattr(progress, "splits", []))
        done = sum(c.done for c in checkpoints)
        total = getattr(progress, "total_splits", len(checkpoints))
        eta = getattr(progress, "eta_s", None)
        rows = getattr(progress, "rows", 0)
        rate = getattr(progress, "rows_per_s", 0.0) or 0.0
        expected = rows + eta * rate if eta is not None and rate else None
        of = f" of about {expected:,.0f}" if expected is not None else ""
        self.bar.update(self.task, completed=rows, total=expected, rate=rate, of=of,
                        splits=f"splits {done} done, {len(checkpoints) - done} running, {total} in all")

    def _stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
            self.task = None

    def close(self) -> None:
        self._stop()
