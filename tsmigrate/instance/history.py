"""The apply history as users read it (`tsmigrate history`, and the last apply in `tsmigrate
status`): the history rows of ``tsmigrate_state`` (see ``tsmigrate.instance.state``) turned into steps
grouped by run, newest first, each run with its outcome, when it started and who ran it.

A run's outcome is the status of its last step: apply runs steps in order and stops at the
first failure or interruption, so ``done`` there means every step was done. Runs of the rewrite
commands (``tsmigrate.instance.records``) are listed the same way, named by their command; runs of
``upgrade`` and ``downgrade`` (versioned migrations) by theirs and the revisions they moved
between (``upgrade b2 -> c3``). A run that took up the steps a killed run left (``resumes``) is
named on that run.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import attrs

from tsmigrate.instance.state import pid_alive

# A run's last step status -> the run's outcome. A step left "started" belongs to a run that
# still holds the apply lock ("running") or was killed before any later apply marked the step
# interrupted ("unfinished").
RUN_OUTCOMES = {"done": "applied", "failed": "failed", "interrupted": "interrupted",
                "started": "unfinished"}
RUNNING = "running"
# The commands whose runs hold the apply lock while they run (the rewrite commands hold leases).
LOCK_COMMANDS = ("apply", "upgrade", "downgrade")
# Outcomes of a run that stopped before its end (another run may have taken its work up).
STOPPED = ("interrupted", "unfinished", "failed")

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
    command: str = "apply"  # the command that ran it (rows of apply leave it out)
    table: str = ""  # the table it acted on (rows written before tsmigrate kept it have none)
    resumes: tuple[str, ...] = ()  # the runs whose interrupted steps this run took up
    revisions: str = ""  # an upgrade's or downgrade's move, "b2 -> c3"

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
            command=str(row.get("command") or "apply"),
            table=str(row.get("table", "")),
            resumes=tuple(r for r in str(row.get("resumes", "")).split(",") if r),
            revisions=str(row.get("revisions", "")),
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
            "error": self.error or None, "command": self.command, "table": self.table or None,
            "revisions": self.revisions or None,
        }


@attrs.frozen
class Run:
    """The steps one apply run recorded, newest first."""

    run: str
    started_ms: int
    steps: tuple[Entry, ...]
    # Its process holds the apply lock now and is alive (a rewrite command's run: its process
    # runs); a run left started without it is unfinished.
    holds_lock: bool = False
    resumed_by: Run | None = None  # the later run that took up its interrupted steps

    @property
    def command(self) -> str:
        return self.steps[0].command

    @property
    def revisions(self) -> str:
        return self.steps[0].revisions

    @property
    def label(self) -> str:
        """What ran, as `history` names a run other than apply's: ``rewrite switch``,
        ``upgrade base -> c3``; empty for apply."""
        if self.command == "apply":
            return ""
        return f"{self.command} {self.revisions}" if self.revisions else self.command

    @property
    def outcome(self) -> str:
        last = self.steps[0].status
        if last == "started" and self.holds_lock:
            return RUNNING
        if last == "done" and self.command != "apply":
            return "done"
        return RUN_OUTCOMES.get(last, last)

    @property
    def outcome_text(self) -> str:
        """The outcome, and what became of a stopped run's work: "interrupted; resumed by run
        X, which completed it"."""
        later = self.resumed_by
        if later is None:
            return self.outcome
        became = "which completed it" if later.outcome in ("applied", "done") else f"now {later.outcome}"
        return f"{self.outcome}; resumed by run {later.run}, {became}"

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
                "failed_step": next((s.number for s in self.steps if s.status == "failed"), None),
                "command": self.command, "revisions": self.revisions or None,
                "resumed_by": self.resumed_by.run if self.resumed_by else None,
                "resumed_outcome": self.resumed_by.outcome if self.resumed_by else None}


def newest_first(rows: Iterable[Mapping[str, Any]]) -> list[Entry]:
    """History rows (any order) as entries: the newest run first, its last step first."""
    entries = [Entry.from_row(row) for row in rows]
    return sorted(entries, key=lambda e: (e.run_started_ms, e.run, e.number or 0, e.at_ms),
                  reverse=True)


def live_owner(lock: Any, now_ms: int | None = None) -> str | None:
    """Who holds the apply lock and may be running (None: free, or its holder is gone: a run
    killed with the lock is unfinished, not running)."""
    if lock is None:
        return None
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return None if lock.stale_reason(now) else lock.owner


def _process_alive(owner: str, live: Collection[str]) -> bool:
    """Whether the process of ``owner`` (run@host:pid) runs: one of ``live`` (host:pid of
    processes holding a rewrite's lease), or a live process on this host."""
    match = _OWNER.match(owner)
    if match is None:
        return False
    if f"{match['host']}:{match['pid']}" in live:
        return True
    if match["host"] != socket.gethostname():
        return False
    return pid_alive(int(match["pid"]))


def rewrite_runners(rewrites: Iterable[Any], now_ms: int | None = None) -> set[str]:
    """host:pid of the processes whose lease on a rewrite (``machine.Runner``) has not run out."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    out = set()
    for rewrite in rewrites:
        runner = rewrite.get("runner") or {}
        if isinstance(runner.get("owner"), str) and runner.get("expires_ms", 0) > now:
            out.add(runner["owner"].partition("@")[2])
    return out


def runs(entries: Sequence[Entry], lock_owner: str | None = None,
         live: Collection[str] = ()) -> list[Run]:
    """Entries (newest first) grouped by run, keeping the order; ``lock_owner``: who holds the
    apply lock now and may be running (its run is running, not unfinished; see ``live_owner``).
    A rewrite command's run holds no apply lock: it is running while its process is (``live``:
    host:pid of the processes holding rewrites' leases, see ``rewrite_runners``). A stopped run
    is linked to the newest run that resumed it."""
    grouped: dict[tuple[int, str], list[Entry]] = {}
    for entry in entries:
        grouped.setdefault((entry.run_started_ms, entry.run), []).append(entry)
    found = [Run(run, started, tuple(steps),
                 holds_lock=(steps[0].owner == lock_owner if steps[0].command in LOCK_COMMANDS
                             else steps[0].status == "started" and _process_alive(steps[0].owner, live)))
             for (started, run), steps in grouped.items()]
    resumers: dict[str, Run] = {}
    for later in reversed(found):  # oldest first: the newest resumer wins
        for resumed in {r for step in later.steps for r in step.resumes}:
            resumers[resumed] = later
    # A resumer that was itself resumed: the last one in the chain tells how it ended.
    out = []
    for one in found:
        later = resumers.get(one.run)
        seen = {one.run}
        while later is not None and later.run in resumers and later.run not in seen:
            seen.add(later.run)
            later = resumers[later.run]
        if later is not None and one.outcome in STOPPED:
            one = attrs.evolve(one, resumed_by=attrs.evolve(later, resumed_by=None))
        out.append(one)
    return out


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
        command = f"{run.label}  " if run.label else ""
        lines.append(f"run {run.run}  {command}{run.outcome_text}  started {utc(run.started_ms)}  "
                     f"by {run.who}  ({len(run.steps)} step(s))")
        width = max(len(step.status) for step in steps)
        for step in steps:
            number = f"{step.number:>3}." if step.number is not None else "   -"
            lines.append(f"  {number} {step.status.ljust(width)}  {step.summary}  [{step.risk}]  "
                         f"{utc(step.at_ms)}")
            if step.error:
                lines.append(f"       error: {step.error}")
    return "\n".join(lines) + "\n"
