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
)

from tsmigrate.instance.pipeprogress import clock
from tsmigrate.instance.state import StateRowError
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


NO_REVERT_SWITCHED = ("watch the services (revert is not possible: switched with --no-revert); "
                      "`tsmigrate rewrite finish {t}` ends the rewrite")


def next_step(rewrite: machine.Rewrite) -> str:
    text = NEXT_STEP[rewrite.phase]
    if rewrite.phase == machine.SWITCHED and rewrite.get("no_revert"):
        text = NO_REVERT_SWITCHED
    return text.format(t=rewrite.target, s=rewrite.source)


def status_data(client: Any, rewrite: machine.Rewrite) -> dict[str, Any]:
    """The status of one rewrite: phase, rows copied / estimated, rows/s, ETA, capture lag,
    collisions, verification, and what to do next."""
    from tsmigrate.rewrite import checkpoints
    from tsmigrate.rewrite import splits as splits_mod

    job = machine.job_of(rewrite)
    ended = rewrite.phase in machine.ENDED
    done = checkpoints.list_splits(client, job.id) if rewrite.phase != machine.ABORTED else []
    try:
        kept = (splits_mod.load(client, job.id) or []) if rewrite.phase != machine.ABORTED else []
    except StateRowError:
        kept = []  # the estimate goes without them; follow and apply, which need them, say why
    rows = sum(c.rows for c in done)
    copied_bytes = sum(c.bytes for c in done)
    estimate = rewrite.get("estimate") or {}
    est_rows = _estimate_rows(kept, done, copied_bytes)
    backfill = rewrite.get("backfill") or {}
    backfill_done = bool(backfill)
    running = not ended and _runner_alive(rewrite)
    rate: float | None
    eta_s: float | None
    if ended or (not backfill_done and not running):  # nobody copies: no rate, no ETA
        rate, eta_s = None, None
    elif backfill_done:  # the backfill's own rate, not diluted by the time since
        rate = backfill["rows"] / max(1e-3, backfill.get("elapsed_s", 0))
        eta_s = 0.0
    else:
        started = int(rewrite.get("backfill_started_ms") or machine.now_ms())
        rate = rows / max(1e-3, (machine.now_ms() - started) / 1000) if rows else 0.0
        eta_s = (est_rows - rows) / rate if rate and est_rows is not None else None
    verification = rewrite.get("verification") or {}
    return {
        "target": rewrite.target,
        "source": rewrite.source,
        "phase": rewrite.phase,
        "resume_to": rewrite.resume_to if rewrite.phase in (machine.PAUSED, machine.FAILED) else None,
        # A cleared error is saved as None (resume, done, abort): not an error.
        "error": rewrite.doc.get("error") or None,
        "rows_copied": rows,
        "rows_estimated": None if est_rows is None else max(est_rows, rows),
        "bytes_copied": copied_bytes,
        "splits": {"total": int(estimate.get("splits", len(done))),
                   "done": sum(c.done for c in done),
                   "running": sum(not c.done for c in done)},
        "rows_per_s": None if rate is None else round(rate, 1),
        "backfill_done": backfill_done,
        "eta_s": None if eta_s is None else round(eta_s, 1),
        "capture_lag_s": rewrite.get("capture_lag_s"),
        "capture": rewrite.get("capture_stats") or {},
        "collisions": verification.get("collisions", []),
        "verification": verification or None,
        "runner": (rewrite.get("runner") or {}).get("owner"),
        "updated": _when(rewrite.get("updated_ms")),
        "side": rewrite.side,
        "fence": rewrite.get("fence"),
        "revert": {"possible": not rewrite.get("no_revert"), "reason": rewrite.get("no_revert")},
        "reverse_capture": (None if rewrite.get("reverse_capture") is None
                            else {"stats": rewrite.get("reverse_stats") or {}}),
        "set_aside": {"capture": machine.set_aside(rewrite, machine.FORWARD),
                      "reverse_capture": machine.set_aside(rewrite, machine.REVERSE)},
        "clients": _clients(client, rewrite),
        "next": next_step(rewrite),
    }


def _estimate_rows(kept: list[Any], states: list[Any], copied_bytes: int) -> int | None:
    """Rows in every key range: a finished range's own count; any other range's size estimate
    at the rows per estimated byte of the finished ranges (or, before any finished, per byte
    copied). None before anything was copied."""
    by_index = {c.index: c for c in states}
    finished = [s for s in kept if s.index in by_index and by_index[s.index].done]
    finished_rows = sum(by_index[s.index].rows for s in finished)
    finished_estimate = sum(s.estimated_bytes for s in finished)
    rows = sum(c.rows for c in states)
    if finished_rows and finished_estimate:
        per_byte = finished_rows / finished_estimate
    elif copied_bytes:
        per_byte = rows / copied_bytes
    elif kept and len(finished) == len(kept):
        return 0  # every range done, all empty
    else:
        return None
    total = 0
    for split in kept:
        state = by_index.get(split.index)
        if state is not None and state.done:
            total += state.rows
        else:
            total += max(state.rows if state is not None else 0, round(split.estimated_bytes * per_byte))
    return max(total, rows)


def _runner_alive(rewrite: machine.Rewrite) -> bool:
    """Whether a process holds the rewrite's lease (not run out, its process alive)."""
    lease = rewrite.get("runner") or {}
    owner = lease.get("owner")
    return bool(owner) and int(lease.get("expires_ms", 0)) > machine.now_ms() \
        and machine._holder_alive(owner)


def _clients(client: Any, rewrite: machine.Rewrite) -> list[dict[str, Any]]:
    """Processes routing this rewrite (heartbeats of the last minute): where each writes."""
    from tsmigrate.rewrite import reverse  # imports the service layer: status only, not apply

    if not rewrite.active:
        return []
    return [{"host": c.get("host"), "pid": c.get("pid"), "table": c.get("table"),
             "side": c.get("side"), "phase": c.get("phase"), "seen": _when(c.get("at_ms"))}
            for c in reverse.live_clients(client, rewrite.target)]


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
    if data["phase"] != machine.ABORTED:  # an aborted rewrite's copy was dropped
        of = "" if data["rows_estimated"] is None else f" of about {data['rows_estimated']:,}"
        line = (f"  rows copied: {data['rows_copied']:,}{of} "
                f"({splits['done']}/{splits['total']} splits done)")
        if data["rows_per_s"] is not None and data.get("backfill_done"):
            line += f", copied at {data['rows_per_s']:,.0f} rows/s"
        elif data["rows_per_s"] is not None:
            eta = "-" if data["eta_s"] is None else f"{data['eta_s']:.0f}s"
            line += f", {data['rows_per_s']:,.0f} rows/s, ETA {eta}"
        elif data["phase"] not in machine.ENDED:
            line += "; not running (no process holds it)"
        lines.append(line)
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
    for which, label in (("capture", "capture"), ("reverse_capture", "reverse capture")):
        rows = (data.get("set_aside") or {}).get(which) or {}
        if rows:
            lines.append(f"  set aside by {label}: {len(rows)} row(s) it could not carry "
                         "(switch, revert and finish refuse until each is fixed)")
            lines += [f"    {key}: {row.get('reason', '')}" for key, row in list(rows.items())[:20]]
    revert = data.get("revert") or {}
    if not revert.get("possible", True):
        lines.append(f"  revert: not possible ({revert.get('reason')}); reverse capture off")
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
    (rows, rows/s, ETA, splits running and done), then capture lag and verification lines.
    Without a terminal (a pipe), a plain line at least every ``TSMIGRATE_PROGRESS_EVERY_S``
    seconds instead of the bar."""

    def __init__(self, console: Console, what: str = "rewrite"):
        from tsmigrate.instance.pipeprogress import PipeProgress

        self.console = console
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.pipe = None if console.is_terminal else PipeProgress(console, what)

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        if event == "phase":
            self._stop()
            self.console.print(f"[bold]rewrite:[/] {data['phase']}")
            if self.pipe is not None:
                self.pipe.update(data["phase"])
        elif event == "backfill":
            self._backfill(data["progress"])
        elif event == "capture" and self.pipe is not None:
            self.pipe.update(self.pipe.phase or "capture",
                             detail=f"capture lag {data.get('lag_s') or 0:.1f}s, "
                                    f"applied {data.get('applied', 0):,}")
        elif event == "verify":
            self._stop()
            self.console.print("verification: " + ("[green]ok[/]" if data["ok"] else
                                                   "[yellow]differences, re-checking[/]"))

    def _backfill(self, progress: Any) -> None:
        checkpoints = list(getattr(progress, "splits", []))
        done = sum(c.done for c in checkpoints)
        total = getattr(progress, "total_splits", len(checkpoints))
        eta = getattr(progress, "eta_s", None)
        rows = getattr(progress, "rows", 0)
        rate = getattr(progress, "rows_per_s", 0.0) or 0.0
        expected = rows + eta * rate if eta is not None and rate else None
        splits = f"splits {done} done, {len(checkpoints) - done} running, {total} in all"
        if self.pipe is not None:
            self.pipe.update("backfill", rows, None if expected is None else round(expected), rate,
                             eta, splits)
            return
        if self.bar is None:
            # The ETA is the backfill's own (bytes copied of the estimate), as status shows it:
            # rich's TimeRemainingColumn forgets its samples whenever the total changes, and
            # the estimated total changes with every report.
            self.bar = Progress(
                TextColumn("{task.description}"), BarColumn(),
                TextColumn("{task.completed:,.0f}{task.fields[of]} rows"),
                TextColumn("{task.fields[rate]:,.0f} rows/s"), TextColumn("{task.fields[splits]}"),
                TimeElapsedColumn(), TextColumn("ETA {task.fields[eta]}"),
                console=self.console, transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("backfill", total=None, rate=0.0, splits="", of="",
                                          eta=clock(None))
        assert self.task is not None
        of = f" of about {expected:,.0f}" if expected is not None else ""
        self.bar.update(self.task, completed=rows, total=expected, rate=rate, of=of, splits=splits,
                        eta=clock(eta))

    def _stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
            self.task = None

    def close(self) -> None:
        self._stop()
        if self.pipe is not None:
            self.pipe.stop()
