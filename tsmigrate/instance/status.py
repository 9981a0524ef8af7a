"""`tsmigrate status`: where the target stands, read from the instance (tsmigrate_state and
inspection) without changing anything.

The report is a list of sections, each a function of a ``StatusContext`` returning a ``Report``
(JSON data and text lines): the target, the apply lock, the last apply, drift from the schema
the last apply left, and rewrites in progress. To add a section (the versioned-migration
"revisions", say), write one more function and list it in ``SECTIONS``; the command renders
every section in text and JSON. A section that finds a malformed state row reports it in its
place, and the command exits 1 after printing the rest.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import attrs
import tablestore as ts

from tsmigrate.errors import TsmigrateError
from tsmigrate.instance import adapter
from tsmigrate.instance.history import (
    LOCK_COMMANDS,
    Run,
    live_owner,
    newest_first,
    rewrite_runners,
    runs,
    utc,
)
from tsmigrate.instance.state import LOCK_KEY, STATE_TABLE, AppliedRecord, Lock, State


@attrs.frozen
class Report:
    """What one section says: ``data`` for JSON, ``lines`` for text (the first one follows the
    section's title), ``error`` when a state row it read is malformed."""

    data: Any
    lines: tuple[str, ...] = attrs.field(converter=tuple)
    error: str = ""


class StatusContext:
    """What sections read, fetched once each, when a section first asks for it."""

    def __init__(self, client: Any, target: Any):
        self.client = client
        self.target = target
        self.state = State(client)

    @functools.cached_property
    def has_state_table(self) -> bool:
        """Whether tsmigrate_state exists (a row read: not a table-level call)."""
        try:
            adapter.get_row(self.client, STATE_TABLE, LOCK_KEY)
        except ts.OTSServiceError as exc:
            if exc.code == "OTSObjectNotExist":
                return False
            raise
        return True

    @functools.cached_property
    def lock(self) -> Lock | None:
        return self.state.read_lock() if self.has_state_table else None

    @functools.cached_property
    def runs(self) -> list[Run]:
        """Recorded runs (of apply and of rewrite commands), newest first."""
        if not self.has_state_table:
            return []
        try:
            owner = live_owner(self.lock)
        except TsmigrateError:  # a malformed lock: the lock section reports it
            owner = None
        try:
            runners = rewrite_runners(self.rewrites)
        except TsmigrateError:  # a malformed rewrite row: the rewrites section reports it
            runners = set()
        return runs(newest_first(self.state.history()), owner, runners)

    @functools.cached_property
    def apply_runs(self) -> list[Run]:
        """Runs of apply, and of upgrade and downgrade (which change the schema as apply does,
        under its lock, and save the catalog they leave)."""
        return [run for run in self.runs if run.command in LOCK_COMMANDS]

    @functools.cached_property
    def applied(self) -> AppliedRecord | None:
        return self.state.applied_record() if self.has_state_table else None

    @functools.cached_property
    def rewrites(self) -> list[Any]:
        from tsmigrate.rewrite import machine

        return machine.all_rewrites(self.client) if self.has_state_table else []

    @functools.cached_property
    def live(self) -> Any:
        """The live catalog as plan sees it (inspection: table-level calls, paced)."""
        from tsmigrate.instance.apply import live_catalog

        return live_catalog(self.client)


@attrs.frozen
class Section:
    key: str  # in the JSON document
    title: str  # in the text
    read: Callable[[StatusContext], Report]


# --- the sections ----------------------------------------------------------------------------------


def target_report(ctx: StatusContext) -> Report:
    target = ctx.target
    data = {"name": target.describe(), "identity": target.identity, "endpoint": target.endpoint,
            "instance": target.instance, "state_table": ctx.has_state_table}
    lines = [f"{target.describe()} ({target.identity})"]
    if not ctx.has_state_table:
        lines.append(f"no {STATE_TABLE} table: tsmigrate has not applied anything here yet")
    return Report(data, lines)


def lock_report(ctx: StatusContext) -> Report:
    lock = ctx.lock
    if lock is None:
        return Report({"held": False}, ["free"])
    stale = lock.stale_reason(int(time.time() * 1000))
    data = {"held": True, "owner": lock.owner, "user": lock.user or None, "host": lock.host,
            "pid": lock.pid, "since": utc(lock.acquired_ms), "since_ms": lock.acquired_ms,
            "lease_until": utc(lock.expires_ms), "stale": stale}
    lines = [f"held by {lock.describe()}"]
    if stale:
        lines.append(f"its holder is gone ({stale}): the next apply takes it over, or "
                     "`tsmigrate unlock` releases it")
    return Report(data, lines)


def last_apply_report(ctx: StatusContext) -> Report:
    applied = ctx.applied
    complete = None
    if applied is not None and applied.at_ms is not None:
        complete = {"at": utc(applied.at_ms), "at_ms": applied.at_ms, "by": applied.who,
                    "owner": applied.owner}
    later = _later_commands(ctx)
    if not ctx.apply_runs:
        lines = ["none: no apply has changed this instance"]
        if complete:
            lines.append(f"the last apply found nothing to change ({complete['at']}, by {complete['by']})")
        return Report({"run": None, "last_complete": complete, "later_commands": later[0]},
                      lines + later[1])
    run = ctx.apply_runs[0]
    data = {**run.to_dict(), "last_complete": complete, "later_commands": later[0]}
    failed = f" at step {data['failed_step']}" if data["failed_step"] else ""
    label = f"{run.label} " if run.label else ""
    lines = [f"run {run.run} {label}{run.outcome_text}{failed} ({len(run.steps)} step(s)), started "
             f"{utc(run.started_ms)} by {run.who}, last step {utc(run.ended_ms)}"]
    if run.steps[0].error:
        lines.append(f"error: {run.steps[0].error}")
    # Every complete apply saves the catalog; one of another run than the last with steps
    # found nothing to change.
    if complete and applied is not None and applied.owner != run.steps[0].owner \
            and complete["at_ms"] > run.ended_ms:
        lines.append(f"a later apply found nothing to change ({complete['at']}, by {complete['by']})")
    lines += later[1]
    lines.append("tsmigrate history lists the steps")
    return Report(data, lines)


def _later_commands(ctx: StatusContext) -> tuple[list[dict[str, Any]], list[str]]:
    """The runs of other commands (rewrite switch, finish, ...) since the last apply run."""
    since = ctx.apply_runs[0].started_ms if ctx.apply_runs else -1
    later = [run for run in ctx.runs if run.command not in LOCK_COMMANDS and run.started_ms > since]
    data = [{**run.to_dict(), "actions": [s.summary + ("" if s.status == "done" else f" ({s.status})")
                                          for s in reversed(run.steps)]}
            for run in later]
    lines = [f"since then: {run.label} {run.outcome} ({'; '.join(one['actions'])}), "
             f"{utc(run.started_ms)} by {run.who}" for run, one in zip(later, data, strict=True)]
    return data, lines


def _recorded_since(ctx: StatusContext, applied: AppliedRecord) -> dict[str, Run]:
    """Tables that recorded runs acted on after the last complete apply saved the schema it
    left (an apply killed or failed midway, a rewrite finish dropping the old table), each with
    what did it: these are tsmigrate's own changes, not drift."""
    at = applied.at_ms or 0
    found: dict[str, Run] = {}
    try:
        recorded = ctx.runs
    except TsmigrateError:  # a malformed history row: the last apply section names it
        return found
    for run in reversed(recorded):  # oldest first: the newest run names a table last
        # The apply that saved the record (before its first step, and again once complete)
        # covers its own steps only when it completed; other runs' steps count from then on.
        saver = run.steps[0].owner == applied.owner
        if saver and run.outcome in ("applied", "done"):  # apply's; upgrade's, downgrade's
            continue
        for step in reversed(run.steps):
            if step.table and (saver or step.at_ms >= at):
                found[step.table] = run
    return found


def drift_report(ctx: StatusContext) -> Report:
    from tsmigrate.planning.drift import drift
    from tsmigrate.rewrite import machine

    applied = ctx.applied
    if applied is None:
        return Report({"checked": False, "drifted": None, "tables": []},
                      ["unknown: nothing has been applied to compare with"])
    if applied.left is None:
        return Report({"checked": False, "drifted": None, "tables": []},
                      ["unknown: the last apply was made by a tsmigrate that did not record the "
                       "schema it left; apply once more to start tracking drift"])
    # tsmigrate itself drops these outside apply: rewrite finish --allow-destructive, abort.
    gone = {r.source for r in ctx.rewrites if r.phase == machine.DONE}
    gone |= {r.target for r in ctx.rewrites if r.phase == machine.ABORTED}
    recorded = _recorded_since(ctx, applied)
    found = [d for d in drift(applied.left, ctx.live, gone) if d.table not in recorded]
    since = f"{utc(applied.at_ms)}, by {applied.who}"
    data = {"checked": True, "drifted": bool(found), "since": utc(applied.at_ms),
            "tables": [d.to_dict() for d in found],
            "recorded": [{"table": t, "run": r.run, "command": r.command, "outcome": r.outcome}
                         for t, r in sorted(recorded.items())]}
    # Changed by tsmigrate since, as the history says: not drift, but not what the record says.
    by_run: dict[str, tuple[Run, list[str]]] = {}
    for table, run in sorted(recorded.items()):
        by_run.setdefault(run.run, (run, []))[1].append(table)
    ours = [f"{', '.join(tables)}: changed since by {run.command} run {run.run} "
            f"({run.outcome_text}), not drift" for run, tables in by_run.values()]
    if not found:
        first = (f"none: nothing changed outside tsmigrate since the last apply ({since})" if ours
                 else f"none: the instance is as the last apply left it ({since})")
        return Report(data, [first, *ours])
    lines = [f"{len(found)} table(s) changed outside tsmigrate since the last apply ({since}):"]
    lines += [f"  {d.text()}" for d in found]
    lines += ours
    lines.append("tsmigrate plan shows what apply would change to match the models")
    return Report(data, lines)


def rewrites_report(ctx: StatusContext) -> Report:
    from tsmigrate.rewrite.progress import status_data, status_text

    active = [r for r in ctx.rewrites if r.active]
    if not active:
        return Report([], ["none in progress"])
    data = [status_data(ctx.client, r) for r in active]
    lines = [f"{len(active)} in progress (tsmigrate rewrite status TABLE for one):"]
    for one in data:
        lines += [f"  {line}" for line in status_text(one).splitlines()]
    return Report(data, lines)


SECTIONS: list[Section] = [
    Section("target", "target", target_report),
    Section("lock", "lock", lock_report),
    Section("last_apply", "last apply", last_apply_report),
    Section("drift", "drift", drift_report),
    Section("rewrites", "rewrites", rewrites_report),
]


def collect(ctx: StatusContext, sections: list[Section] | None = None) -> list[tuple[Section, Report]]:
    """Every section's report; a tsmigrate error in one (a malformed state row) becomes that
    section's error, so the others are still shown."""
    reports = []
    for section in SECTIONS if sections is None else sections:
        try:
            report = section.read(ctx)
        except TsmigrateError as exc:
            report = Report(None, [f"error: {exc}"], error=str(exc))
        reports.append((section, report))
    return reports


def status_json(reports: list[tuple[Section, Report]]) -> dict[str, Any]:
    document: dict[str, Any] = {section.key: report.data for section, report in reports}
    document["errors"] = [f"{section.key}: {report.error}" for section, report in reports
                          if report.error]
    return document


def status_text(reports: list[tuple[Section, Report]]) -> str:
    width = max(len(section.title) for section, _report in reports) + 2
    lines = []
    for section, report in reports:
        first, *rest = report.lines or ("",)
        lines.append(f"{(section.title + ':').ljust(width)}{first}")
        lines += [f"{' ' * width}{line}" for line in rest]
    return "\n".join(lines) + "\n"
