"""The apply history as users read it (`tsmigrate history`, and the last apply in `tsmigrate
status`): the history rows of ``tsmigrate_state`` (see ``tsmigrate.state``) turned into steps
grouped by run, newest first, each run with its outcome, when it started and who ran it.

A run's outcome is the status of its last step: apply runs steps in order and stops at the
first failure or interruption, so ``done`` there means every step was done.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

# A run's last step status -> the run's outcome. A step left "started" belongs to a run that
# still holds the apply lock ("running") or was killed before any later apply marked the step
# interrupted ("unfinished").
RUN_OUTCOMES = {"done": "applied", "failed": "failed", "interrupted": "interrupted",
                "started": "unfinished"}
RUNNING = "running"

_ROW_ID = re.compile(r"^(?P<started>\d{13})-(?P<run>[^-]+)-(?P<step>\d+)$")
_OWNER = re.compile(r"^(?P<run>[^@]+)@(?P<host>.*):(?P<pid>\d+)$")


def utc(ms: int | None) -> str | None:
    if ms is None:
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


@attrs.frozen
class Entry:
    """One step of one apply run, as its history row says."""

    run: str
    run_started_ms: int
    number: int | None  # the step's place in its run (None: a row id tsmigrate did not write)
    kind: str
    summary: str
    risk: str
    status: str
    at_ms: int  # when the status was written
    owner: str  # run@host:pid
    host: str
    user: str
    plan: str
    error: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Entry:
        """``row``: a validated history row (``State.history()``), its id included."""
        owner = str(row["owner"])
        by_id = _ROW_ID.match(str(row["id"]))
        by_owner = _OWNER.match(owner)
        run = by_id["run"] if by_id else (by_owner["run"] if by_owner else owner)
        return cls(
            run=run,
            run_started_ms=int(by_id["started"]) if by_id else int(row["at_ms"]),
            number=int(by_id["step"]) if by_id else None,
            kind=str(row["step"]),
            summary=str(row["summary"]),
            risk=str(row.get("risk", "")),
            status=str(row["status"]),
            at_ms=int(row["at_ms"]),
            owner=owner,
            host=by_owner["host"] if by_owner else "",
            user=str(row.get("user", "")),
            plan=str(row.get("plan", "")),
            error=str(row.get("error", "")),
        )

    @property
    def who(self) -> str:
        """The user and host that ran it (the process when the user was not recorded)."""
        if self.user and self.host:
            return f"{self.user}@{self.host}"
        return self.owner.split("@", 1)[1] if "@" in self.owner else self.owner

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run, "step": self.number, "kind": self.kind, "summary": self.summary,
            "risk": self.risk, "status": self.status, "at": utc(self.at_ms), "at_ms": self.at_ms,
            "by": self.who, "owner": self.owner, "user": self.user or None, "plan": self.plan,
            "error": self.error or None,
        }


@attrs.frozen
class Run:
    """The steps one apply run recorded, newest first."""

    run: str
    started_ms: int
    steps: tuple[Entry, ...]
    holds_lock: bool = False  # its process holds the apply lock now

    @property
    def outcome(self) -> str:
        last = self.steps[0].status
        if last == "started" and self.holds_lock:
            return RUNNING
        return RUN_OUTCOMES.get(last, last)

    @property
    def who(self) -> str:
        return self.steps[0].who

    @property
    def ended_ms(self) -> int:
        return max(step.at_ms for step in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "outcome": self.outcome, "started": utc(self.started_ms),
                "started_ms": self.started_ms, "ended": utc(self.ended_ms), "by": self.who,
                "owner": self.steps[0].owner, "steps": len(self.steps),
                "failed_step": next((s.number for s in self.steps if s.status == "failed"), None)}


def newest_first(rows: Iterable[Mapping[str, Any]]) -> list[Entry]:
    """History rows (any order) as entries: the newest run first, its last step first."""
    entries = [Entry.from_row(row) for row in rows]
    return sorted(entries, key=lambda e: (e.run_started_ms, e.run, e.number or 0, e.at_ms),
                  reverse=True)


def runs(entries: Sequence[Entry], lock_owner: str | None = None) -> list[Run]:
    """Entries (newest first) grouped by run, keeping the order; ``lock_owner``: who holds the
    apply lock now (its run is running, not unfinished)."""
    grouped: dict[tuple[int, str], list[Entry]] = {}
    for entry in entries:
        grouped.setdefault((entry.run_started_ms, entry.run), []).append(entry)
    return [Run(run, started, tuple(steps), holds_lock=steps[0].owner == lock_owner)
            for (started, run), steps in grouped.items()]


def _limited(all_runs: Sequence[Run], limit: int) -> list[tuple[Run, tuple[Entry, ...]]]:
    """The runs holding the ``limit`` newest steps, each with its steps among them."""
    shown, left = [], limit
    for run in all_runs:
        if left <= 0:
            break
        shown.append((run, run.steps[:left]))
        left -= len(run.steps)
    return shown


def history_json(target: str, all_runs: Sequence[Run], limit: int) -> dict[str, Any]:
    shown = _limited(all_runs, limit)
    return {
        "target": target,
        "total_steps": sum(len(r.steps) for r in all_runs),
        "limit": limit,
        "steps": [dict(step.to_dict(), run_outcome=run.outcome) for run, steps in shown
                  for step in steps],
        "runs": [run.to_dict() for run, _steps in shown],
    }


def history_text(target: str, all_runs: Sequence[Run], limit: int) -> str:
    lines = [f"target: {target}"]
    if not all_runs:
        lines.append("No history: no apply has changed this instance yet.")
        return "\n".join(lines) + "\n"
    shown = _limited(all_runs, limit)
    total = sum(len(r.steps) for r in all_runs)
    count = sum(len(steps) for _run, steps in shown)
    more = f"; --limit {total} shows all" if total > count else ""
    lines.append(f"History, newest first ({count} of {total} step(s){more}):")
    for run, steps in shown:
        lines.append("")
        lines.append(f"run {run.run}  {run.outcome}  started {utc(run.started_ms)}  by {run.who}"
                     f"  ({len(run.steps)} step(s))")
        width = max(len(step.status) for step in steps)
        for step in steps:
            number = f"{step.number:>3}." if step.number is not None else "   -"
            lines.append(f"  {number} {step.status.ljust(width)}  {step.summary}  [{step.risk}]  "
                         f"{utc(step.at_ms)}")
            if step.error:
                lines.append(f"       error: {step.error}")
    return "\n".join(lines) + "\n"
