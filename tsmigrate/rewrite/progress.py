"""What a rewrite looks like from outside: the status (``tsmigrate rewrite status``, text and
JSON, read from ``tsmigrate_state`` alone) and the live progress bar ``apply`` shows."""

from __future__ import annotations

import contextlib
import socket
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

from tsmigrate.contract import routes
from tsmigrate.instance.pipeprogress import clock
from tsmigrate.instance.state import StateRowError, pid_alive
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
    holder = runner_of(rewrite)
    captures = captures_of(rewrite, holder)
    forward = next((c for c in captures if c["name"] == "capture"), None)
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
        # Forward capture's lag while it runs; None when it does not (a stopped one's is stale).
        "capture_lag_s": forward["lag_s"] if forward else None,
        "capture": rewrite.get("capture_stats") or {},
        "collisions": verification.get("collisions", []),
        "verification": verification or None,
        "runner": (rewrite.get("runner") or {}).get("owner"),
        "run_by": holder,
        "captures": captures,
        "fence_up": fence_up(client, rewrite, holder),
        "updated": _when(rewrite.get("updated_ms")),
        "side": rewrite.side,
        "fence": rewrite.get("fence"),
        "revert": {"possible": not rewrite.get("no_revert"), "reason": rewrite.get("no_revert")},
        "reverse_capture": (None if rewrite.get("reverse_capture") is None
                            else {"stats": rewrite.get("reverse_stats") or {}}),
        "set_aside": {"capture": machine.set_aside(rewrite, machine.FORWARD),
                      "reverse_capture": machine.set_aside(rewrite, machine.REVERSE),
                      "late_net": machine.set_aside(rewrite, "late_net")},
        "conflicts": _conflicts(client, rewrite),
        # What prepare found of capture against the source's writes (``capacity``), or None.
        "capture_capacity": rewrite.get("capture_capacity") or None,
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


def _age_s(ms: Any, now_ms: int) -> float | None:
    return None if not isinstance(ms, (int, float)) or not ms else round(max(0.0, (now_ms - ms) / 1000), 1)


def runner_of(rewrite: machine.Rewrite) -> dict[str, Any] | None:
    """The process holding the rewrite's lease (``machine.Runner``), as far as this host can
    tell: host, pid, until when its lease runs, whether it ran out, whether the process is alive
    (``alive``: this host's process table says so; ``gone``; ``unknown``: another host, whose
    lease alone tells); None when nobody holds it."""
    lease = rewrite.get("runner") or {}
    owner = lease.get("owner")
    if not isinstance(owner, str) or not owner:
        return None
    host, _, pid = owner.partition("@")[2].rpartition(":")
    expires_ms = int(lease.get("expires_ms") or 0)
    expired = expires_ms <= machine.now_ms()
    if host == socket.gethostname() and pid.isdigit():
        process = "alive" if pid_alive(int(pid)) else "gone"
    else:
        process = "unknown"
    return {"owner": owner, "host": host or None, "pid": int(pid) if pid.isdigit() else None,
            "lease_until": _when(expires_ms), "lease_until_ms": expires_ms,
            "lease_expired": expired, "process": process,
            "alive": not expired and process != "gone"}


def _holder_state(holder: dict[str, Any]) -> str:
    if holder["process"] == "gone":
        return "its process is gone"
    if holder["lease_expired"]:
        return f"its lease ran out at {holder['lease_until']}"
    if holder["process"] == "alive":
        return f"alive, lease until {holder['lease_until']}"
    return f"on another host: lease until {holder['lease_until']}"


def _holder_text(holder: dict[str, Any] | None) -> str:
    if holder is None:
        return "no process (none holds the rewrite's lease)"
    where = f"{holder['host']}:{holder['pid']}"
    command = holder.get("command")
    return ((f"{command} (run {holder['run']}) on {where}" if command else where)
            + f" ({_holder_state(holder)})")


# The captures a rewrite keeps, each under its own keys of the doc: (name, label, position,
# stats, lag, when it last saved, its last error); the late-write net reads the side that no
# longer takes writes (its ``watched``) into the other one.
CAPTURE_KEYS = (
    ("capture", "capture", "capture", "capture_stats", "capture_lag_s", "capture_at_ms",
     "capture_error"),
    ("reverse_capture", "reverse capture", "reverse_capture", "reverse_stats", "reverse_lag_s",
     "reverse_at_ms", "reverse_error"),
    ("late_net", "late writes", "late_net", "late_stats", "late_lag_s", "late_at_ms", "late_error"),
)


def _in_use(rewrite: machine.Rewrite, name: str) -> bool:
    """Whether capture ``name`` is the one the rewrite's phase runs (paused or failed: the phase
    it resumes at)."""
    phase = rewrite.phase
    if phase in (machine.PAUSED, machine.FAILED):
        phase = rewrite.resume_to or machine.READY
    finish_from = rewrite.get("finish_from") or machine.READY
    if name == "capture":
        return phase in (machine.BACKFILL, machine.CATCH_UP, machine.READY, machine.SWITCHING) or (
            phase == machine.FINISHING and finish_from == machine.READY)
    if name == "reverse_capture":
        return not rewrite.get("no_revert") and (
            phase in (machine.SWITCHED, machine.REVERTING)
            or (phase == machine.FINISHING and finish_from == machine.SWITCHED))
    return True  # the late-write net: while the rewrite keeps it


def captures_of(rewrite: machine.Rewrite, holder: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each capture the rewrite keeps: its direction, state (``running``; ``idle``: not used in
    this phase; ``stopped``: this phase needs it and no live process runs it, or an error
    stopped it), why, its lag (only while running: a stopped capture's last lag is stale), its
    last progress and how long ago, its last error and its stats."""
    now = machine.now_ms()
    out = []
    for name, label, position, stats_key, lag_key, at_key, error_key in CAPTURE_KEYS:
        where = rewrite.get(position)
        if not isinstance(where, dict):
            continue
        if name == "late_net":
            watched = where.get("watched") or rewrite.source
            into = rewrite.target if watched == rewrite.source else rewrite.source
        elif name == "capture":
            watched, into = rewrite.source, rewrite.target
        else:
            watched, into = rewrite.target, rewrite.source
        error = rewrite.get(error_key) or None
        stats = rewrite.get(stats_key)
        stats = stats if isinstance(stats, dict) else {}
        at_ms = rewrite.get(at_key)
        at_ms = at_ms if isinstance(at_ms, (int, float)) and not isinstance(at_ms, bool) else None
        if not rewrite.active:
            state, why = "idle", f"the rewrite is {rewrite.phase}"
        elif not _in_use(rewrite, name):
            state, why = "idle", f"not used in phase {rewrite.phase}"
        elif error:
            state, why = "stopped", "its last error stopped it"
        elif rewrite.phase in (machine.PAUSED, machine.FAILED):
            state, why = "stopped", f"the rewrite is {rewrite.phase}"
        elif holder is None:
            state, why = "stopped", "no process runs it"
        elif not holder["alive"]:
            state, why = "stopped", f"the process that ran it stopped: {_holder_text(holder)}"
        else:
            state, why = "running", f"run by {holder['host']}:{holder['pid']}"
        lag = rewrite.get(lag_key)
        running = state == "running"
        # Outside a command's run (apply's, a fence's), `follow` is what runs captures.
        restart = (f"tsmigrate rewrite follow {rewrite.target}" if state == "stopped"
                   and rewrite.phase in (machine.READY, machine.SWITCHED) else None)
        out.append({
            "name": name, "label": label, "from": watched, "to": into,
            "direction": f"{watched} -> {into}", "state": state, "why": why,
            "lag_s": (float(lag) if running and isinstance(lag, (int, float)) else None),
            "caught_up": bool(stats.get("caught_up")) if running else None,
            "last_progress": _when(at_ms), "last_progress_ms": at_ms,
            "last_progress_age_s": _age_s(at_ms, now),
            "error": error, "restart": restart, "stats": stats,
            # The last round's rate and the workers while it runs; each shard's records (applied
            # by the process running it), rate and lag, the laggiest first.
            "records_per_s": (float(stats["records_per_s"]) if running
                              and isinstance(stats.get("records_per_s"), (int, float)) else None),
            "workers": (int(stats["workers"]) if running
                        and isinstance(stats.get("workers"), (int, float)) else None),
            "shards": shards_of(stats, running),
        })
    return out


SHARDS_SHOWN = 16  # shard lines the text shows a capture (the JSON has every one)


def short_ids(ids: list[str], least: int = 8) -> dict[str, str]:
    """Each id's shortest prefix of at least ``least`` characters that no other id starts with."""
    short = {}
    for one in ids:
        n = min(least, len(one))
        while n < len(one) and any(other != one and other.startswith(one[:n]) for other in ids):
            n += 1
        short[one] = one[:n]
    return short


def shards_of(stats: dict[str, Any], running: bool) -> list[dict[str, Any]]:
    """A capture's shards from its stats: id, short id, records applied, and (while it runs:
    a stopped capture's are stale) the last round's records/s and the lag; the laggiest first."""
    saved = stats.get("shards")
    saved = {k: v for k, v in saved.items() if isinstance(v, dict)} if isinstance(saved, dict) else {}
    short = short_ids(list(saved))

    def number(value: Any) -> float:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0

    out = [{"id": shard_id, "short_id": short[shard_id], "records": int(number(one.get("records"))),
            "records_per_s": round(number(one.get("records_per_s")), 1) if running else None,
            "lag_s": round(number(one.get("lag_s")), 3) if running else None,
            "done": bool(one.get("done"))}
           for shard_id, one in saved.items()]
    out.sort(key=lambda s: (-(s["lag_s"] or 0.0), -s["records"], s["id"]))
    return out


def fence_up(client: Any, rewrite: machine.Rewrite,
             holder: dict[str, Any] | None) -> dict[str, Any] | None:
    """The fence while it is up (services on the model API hold their writes): the phase that
    raised it, since when (``fence_ms``; unknown for finish from ready, which keeps no time),
    who holds it (the runner, and the command's run in the history), and how long a write
    waits (``routes.HOLD_S``) before it fails with ``WritesHeld``; None when no fence is up."""
    if not rewrite.active or rewrite.side != machine.HOLD:
        return None
    phase = rewrite.phase
    if phase in (machine.PAUSED, machine.FAILED):
        phase = rewrite.resume_to or phase
    since_ms = rewrite.get("fence_ms") if phase in (machine.SWITCHING, machine.REVERTING) else None
    if not isinstance(since_ms, (int, float)) or isinstance(since_ms, bool):
        since_ms = None
    if holder is not None:
        holder = {**holder, **_holder_run(client, rewrite, holder)}
    return {"phase": phase, "since": _when(since_ms), "since_ms": since_ms,
            "age_s": _age_s(since_ms, machine.now_ms()), "held_by": holder,
            "held_by_live": bool(holder and holder["alive"]),
            "write_wait_s": routes.HOLD_S, "writes_fail_with": routes.HELD_ERROR}


def _holder_run(client: Any, rewrite: machine.Rewrite, holder: dict[str, Any]) -> dict[str, Any]:
    """The history run of the command holding the lease (its process's newest run on this
    rewrite): {"run", "command", "run_started"}, or nothing when the history does not say."""
    from tsmigrate.instance.history import newest_first
    from tsmigrate.instance.state import State

    process = f"{holder['host']}:{holder['pid']}"
    with contextlib.suppress(Exception):  # best effort: the lease already names the process
        for entry in newest_first(State(client).history()):
            if entry.table == rewrite.target and entry.owner.partition("@")[2] == process:
                return {"run": entry.run, "command": entry.command,
                        "run_started": _when(entry.run_started_ms)}
    return {}


def _conflicts(client: Any, rewrite: machine.Rewrite) -> dict[str, int]:
    """Late writes that conflicted with the table of record (``late``): found, not accepted."""
    from tsmigrate.rewrite import late

    found = late.conflicts(client, rewrite.target) if rewrite.get("late_net") else []
    return {"found": len(found), "unaccepted": sum(not c.get("accepted") for c in found)}


def _clients(client: Any, rewrite: machine.Rewrite) -> list[dict[str, Any]]:
    """Processes routing this rewrite (heartbeats of the last minute): where each writes."""
    from tsmigrate.rewrite import reverse  # imports the service layer: status only, not apply

    if not rewrite.active:
        return []
    return [{"host": c.get("host"), "pid": c.get("pid"), "table": c.get("table"),
             "side": c.get("side"), "phase": c.get("phase"), "seen": _when(c.get("at_ms")),
             "age_s": round(float(c.get("age_s") or 0), 1)}
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
    lines += [f"  {line}" for line in captures_text(data.get("captures") or [])]
    capacity = data.get("capture_capacity")
    if capacity and data["phase"] not in machine.ENDED and capacity.get("text"):
        lines.append(f"  capture against the writes (at prepare): {capacity['text']}")
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
    conflicts = data.get("conflicts") or {}
    if conflicts.get("found"):
        lines.append(f"  late-write conflicts: {conflicts['found']} ({conflicts['unaccepted']} not "
                     f"accepted; `tsmigrate rewrite conflicts {data['target']}` lists them, finish "
                     "refuses until --accept-conflicts)")
    for which, label in (("capture", "capture"), ("reverse_capture", "reverse capture"),
                         ("late_net", "the late-write net")):
        rows = (data.get("set_aside") or {}).get(which) or {}
        if rows:
            lines.append(f"  set aside by {label}: {len(rows)} row(s) it could not carry "
                         "(switch, revert and finish refuse until each is fixed)")
            lines += [f"    {key}: {row.get('reason', '')}" for key, row in list(rows.items())[:20]]
    revert = data.get("revert") or {}
    if not revert.get("possible", True):
        lines.append(f"  revert: not possible ({revert.get('reason')}); reverse capture off")
    lines.append(f"  writes of the model API go to: {_side_text(data)}")
    lines += [f"  {line}" for line in fence_text(data.get("fence_up"), data["target"])]
    fence = data.get("fence")
    if fence:
        lines.append(f"  last fence: to the {fence.get('to')}, writes held {fence.get('held_ms', 0)} ms"
                     + (f", {len(fence['unacknowledged'])} client(s) did not acknowledge"
                        if fence.get("unacknowledged") else ""))
    for c in data.get("clients") or ():
        lines.append(f"    client {c['host']}:{c['pid']} ({c['table']}): {c['side']}, "
                     f"saw {c['phase']} {c['age_s']:g}s ago (by the service's clock)")
    if data.get("run_by"):
        lines.append(f"  run by: {data['runner']} ({_holder_state(data['run_by'])})")
    lines.append(f"  next: {data['next']}")
    return "\n".join(lines)


def _ago(age_s: float | None) -> str:
    if age_s is None:
        return "-"
    if age_s < 120:
        return f"{age_s:.0f}s ago"
    return f"{age_s / 60:.0f} min ago" if age_s < 7200 else f"{age_s / 3600:.1f} h ago"


def captures_text(captures: list[dict[str, Any]]) -> list[str]:
    """One line per capture (and its error below it): direction, state, lag while it runs,
    last progress, what it did."""
    lines = []
    for c in captures:
        head = f"{c['label']} {c['direction']}: {c['state']}"
        if c["state"] == "running":
            lag = "-" if c["lag_s"] is None else f"{c['lag_s']:.1f}s"
            head += f", lag {lag}" + (" (caught up)" if c["caught_up"] else "")
        else:
            head += f" ({c['why']})"
        progress = ("no progress saved yet" if c["last_progress"] is None
                    else f"last progress {c['last_progress']} ({_ago(c['last_progress_age_s'])})")
        stats = c["stats"]
        did = []
        if stats:
            did.append(f"applied {stats.get('applied', 0):,}")
        if c["name"] == "late_net":
            did += [f"{stats.get(k, 0):,} {text}" for k, text in
                    (("late_writes", "late write(s)"), ("carried", "version(s) carried"),
                     ("conflicts", "conflict(s)")) if k in stats]
        elif stats:
            did += [f"re-synced {stats.get('resynced', 0):,}", f"moved {stats.get('moved', 0):,}"]
        lines.append(f"{head}; {progress}" + (f"; {', '.join(did)}" if did else ""))
        lines += _rate_lines(c)
        if c["error"]:
            lines.append(f"  last error: {c['error']}")
        if c.get("restart"):
            lines.append(f"  `{c['restart']}` starts it again from its saved position")
    return lines


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' if n != 1 else ''}"


def _rate_lines(capture: dict[str, Any]) -> list[str]:
    """A running capture's rate and workers, and (with more than one shard) a line a shard, the
    laggiest first, at most ``SHARDS_SHOWN``."""
    if capture["state"] != "running" or capture.get("records_per_s") is None:
        return []
    shards = capture.get("shards") or []
    lines = [f"  {capture['records_per_s']:,.0f} records/s, "
             f"{_plural(capture.get('workers') or 1, 'worker')}, {_plural(len(shards), 'shard')}"]
    if len(shards) > 1:
        for shard in shards[:SHARDS_SHOWN]:
            lines.append(f"    shard {shard['short_id']}: {shard['records']:,} records, "
                         f"{shard['records_per_s'] or 0:,.0f} records/s, lag {shard['lag_s'] or 0:.1f}s"
                         + (", done" if shard["done"] else ""))
        if len(shards) > SHARDS_SHOWN:
            lines.append(f"    … {len(shards) - SHARDS_SHOWN} more")
    return lines


def fence_text(fence: dict[str, Any] | None, target: str) -> list[str]:
    """A fence that is up: since when, who holds it, what services' writes do meanwhile."""
    if not fence:
        return []
    since = ("since an unknown time" if fence["since"] is None
             else f"since {fence['since']} ({_ago(fence['age_s'])})")
    lines = [f"fence: UP ({fence['phase']}) {since}, held by {_holder_text(fence['held_by'])}",
             f"  services' writes on the model API wait for it, each at most "
             f"{fence['write_wait_s']:.0f}s, then fail with {fence['writes_fail_with']}"]
    if not fence["held_by_live"]:
        completes, lowers = {machine.SWITCHING: ("switch", "revert"),
                             machine.REVERTING: ("revert", "switch")}.get(fence["phase"],
                                                                          ("finish", None))
        lines.append(f"  no live process holds it: `tsmigrate rewrite {completes} {target}` "
                     "completes it" + (f", `tsmigrate rewrite {lowers} {target}` lowers it back"
                                       if lowers else ""))
    return lines


def _side_text(data: dict[str, Any]) -> str:
    side = data.get("side")
    if side == machine.HOLD:
        return "nowhere: held while the fence is up"
    return data["source"] if side == machine.SOURCE else data["target"]


def late_wait_line(data: dict[str, Any]) -> str:
    """What a command waits for before it trusts that no late write can still land."""
    return (f"late writes: waiting {data['seconds']:.1f}s more, then reading the stream of the "
            f"table services left a last time; an acknowledged write lands within {data['why']}")


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
        elif event == "capacity":
            self._stop()
            self.console.print(("warning: " if data.get("warning") else "")
                               + f"capture against the writes: {data['text']}", markup=False)
        elif event == "verify":
            self._stop()
            self.console.print("verification: " + ("[green]ok[/]" if data["ok"] else
                                                   "[yellow]differences, re-checking[/]"))
        elif event == "late-wait":
            self._stop()
            self.console.print(late_wait_line(data), markup=False)

    def _backfill(self, progress: Any) -> None:
        checkpoints = list(getattr(progress, "splits", []))
        done = sum(c.done for c in checkpoints)
        total = getattr(progress, "total_splits", len(checkpoints))
        eta = getattr(progress, "eta_s", None)
        rows = getattr(progress, "rows", 0)
        rate = getattr(progress, "rows_per_s", 0.0) or 0.0
        # The rows to reach (executors.expected_bytes): a floor once a range ran past its estimate.
        expected = getattr(progress, "estimated_rows", None)
        floor = bool(getattr(progress, "past_estimate", False))
        splits = f"splits {done} done, {len(checkpoints) - done} running, {total} in all"
        if self.pipe is not None:
            self.pipe.update("backfill", rows, expected, rate, eta, splits, floor=floor)
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
                                          eta="unknown")
        assert self.task is not None
        of = ("" if expected is None else f" of more than {expected:,.0f}" if floor and expected > rows
              else "" if floor else f" of about {expected:,.0f}")
        self.bar.update(self.task, completed=rows, total=None if floor else expected, rate=rate, of=of,
                        splits=splits, eta="unknown" if eta is None else clock(eta))

    def _stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
            self.task = None

    def close(self) -> None:
        self._stop()
        if self.pipe is not None:
            self.pipe.stop()
