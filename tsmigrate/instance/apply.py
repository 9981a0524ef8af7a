"""Apply: execute exactly the plan that inspection of the live instance gives, safely.

- The lock (a conditional write in the instance) keeps two applies apart.
- A plan file pins the change: apply refuses when the file was edited, was made for another
  instance or other models, or when the live schema is no longer the one it was made from. A
  live schema equal to a state *inside* the plan (an earlier apply of it died midway) resumes
  from there.
- Nothing destructive runs without ``allow_destructive``.
- A ``rewrite_table`` step runs the rewrite engine (``tsmigrate.rewrite``) to ``ready``; a rewrite
  a crash left unfinished is continued from its state, not planned again.
- A ``reindex_search_index`` step runs the reindex flow (``tsmigrate.reindex``) stage by stage
  from its checkpoint: a rerun plans the same step while the index has its old schema and resumes
  at the stage reached; a reindex killed after its switch (the plan shows nothing then) is
  finished after the plan's steps.
- Every step is recorded in the history, executed, then waited on until the live table looks as
  the plan predicted; a crash leaves a state that the next apply plans from.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import attrs

from tsmigrate.errors import ApplyRefused, StepFailed, TsmigrateError
from tsmigrate.instance import adapter
from tsmigrate.instance.history import Entry
from tsmigrate.instance.state import STATE_TABLE, Lease, Lock, LockHeld, State
from tsmigrate.lint import ERROR, Finding, LintConfig, run_lint
from tsmigrate.planning import ops
from tsmigrate.planning.plan import Plan, make_plan, recorded_catalog, with_known_derivations
from tsmigrate.planning.planfile import check_plan_document, planned_steps, resume_point, step_json
from tsmigrate.reindex import flow
from tsmigrate.reindex.flow import ReindexSettings
from tsmigrate.rewrite import planned
from tsmigrate.rewrite.planned import RewriteSettings
from tsmigrate.schema import Catalog, physical

RENEW_EVERY_S = 30.0  # apply's lock lease is renewed this often while a rewrite runs


class LintRefused(ApplyRefused):
    """Lint found an error in the plan, so apply will not run it (exit 3, as plan)."""

    exit_code = 3


class ApplyFailed(StepFailed):
    """A step failed or the run was interrupted midway: says which step, what was done before
    it, and that running apply again continues from the live state."""

    def __init__(self, plan: Plan, number: int, cause: BaseException | str, *, interrupted: bool = False):
        self.plan, self.number, self.interrupted = plan, number, interrupted
        self.cause = cause if isinstance(cause, str) else (str(cause) or type(cause).__name__)
        total, step = len(plan.steps), plan.steps[number - 1]
        done = self.done
        before = (
            f"steps 1-{number - 1} were done ({'; '.join(s.summary() for s in done)})"
            if len(done) > 1 else f"step 1 was done ({done[0].summary()})" if done
            else "no step was done before it"
        )
        what = "interrupted during" if interrupted else "failed at"
        super().__init__(
            f"apply {what} step {number} of {total} ({step.summary()}): {self.cause}. {before}; "
            "running tsmigrate apply again plans from the live state and continues from there"
        )

    @property
    def done(self) -> list[ops.Step]:
        return list(self.plan.steps[: self.number - 1])

    def with_cause(self, cause: str) -> ApplyFailed:
        return type(self)(self.plan, self.number, cause, interrupted=self.interrupted)


class ApplyInterrupted(ApplyFailed):
    """Ctrl-C (or SIGTERM turned into KeyboardInterrupt) during a step."""

    exit_code = 130


def blocking_findings(
    findings: Sequence[Finding], plan: Plan, *, allow_destructive: bool
) -> list[Finding]:
    """The error findings apply refuses to run with; an error about a destructive step (a
    dropped table) is what ``allow_destructive`` acknowledges."""
    return [f for f in findings if f.severity == ERROR and not (
        allow_destructive and f.step and plan.steps[f.step - 1].risk == ops.DESTRUCTIVE)]


# --- apply ---------------------------------------------------------------------------------------


@attrs.frozen
class Outcome:
    plan: Plan
    executed: int
    note: str = ""
    rewrites: tuple[Any, ...] = ()  # the rewrites this apply took to ready (machine.Rewrite)
    findings: tuple[Finding, ...] = ()  # lint of the plan (with a lint configuration)
    reindexes: tuple[Any, ...] = ()  # the reindexes this apply finished (reindex.Checkpoint)


Progress = Callable[[int, int, ops.Step], None]
Waiting = Callable[[ops.Step, str, float], None]


def _left_by(live: Catalog, plan: Plan) -> Catalog:
    """The live schema after every step of ``plan`` (what ``tsmigrate status`` checks drift
    against)."""
    left = physical(live)
    for step in plan.steps:
        left = ops.transform(left, step)
    return left


def _renewing(state: State, report: Callable[[str, dict[str, Any]], None]
              ) -> Callable[[str, dict[str, Any]], None]:
    """A rewrite's progress callback that also renews apply's lock lease while it runs."""
    last = [time.monotonic()]

    def wrapped(event: str, data: dict[str, Any]) -> None:
        if time.monotonic() - last[0] > RENEW_EVERY_S:
            state.renew()
            last[0] = time.monotonic()
        report(event, data)

    return wrapped


def live_catalog(client: Any) -> Catalog:
    """The live instance as IR (tsmigrate's own table left out), with the key derivations
    tsmigrate recorded when it last applied."""

    live = adapter.inspect(client, exclude=(STATE_TABLE,))
    return planned.mask_live(client, with_known_derivations(live, State(client).applied_catalog()))


def finished_rewrites(client: Any) -> frozenset[str]:
    """The replaced tables whose rewrite is done (``rewrite finish`` ran): only these may be
    dropped by ``--prune`` (see ``make_plan``)."""
    from tsmigrate.rewrite import machine

    return frozenset(r.source for r in machine.all_rewrites(client) if r.phase == machine.DONE)


@attrs.frozen
class ApplyOptions:
    """How one run of apply goes, as ``tsmigrate apply`` builds it from its flags: what it may
    do (``allow_destructive``: steps that lose data; ``prune``: drop tables no model declares),
    how long it waits for a lock another apply holds, the lint severities it refuses on (None:
    no lint), and how rewrite and reindex steps run."""

    allow_destructive: bool = False
    prune: bool = False
    lock_timeout_s: float = 0.0
    lint: LintConfig | None = None
    rewrite: RewriteSettings = attrs.field(factory=RewriteSettings)
    reindex: ReindexSettings = attrs.field(factory=ReindexSettings)


@attrs.frozen
class ApplyHooks:
    """What apply tells its caller and asks it: ``show`` sees the plan and its findings before
    ``confirm`` is asked; ``progress(number, total, step)`` at each step; ``waiting(step, what,
    elapsed_s)`` while a step waits to settle (an index build); ``on_lock_wait`` is told who
    holds the lock apply waits for."""

    confirm: Callable[[Plan], bool] = lambda plan: True
    show: Callable[[Plan, Sequence[Finding]], None] | None = None
    progress: Progress | None = None
    waiting: Waiting | None = None
    on_lock_wait: Callable[[Lock], None] | None = None


def apply(
    client: Any,
    models: Catalog,
    options: ApplyOptions = ApplyOptions(),
    hooks: ApplyHooks = ApplyHooks(),
    *,
    target_identity: str,
    document: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> Outcome:
    """Bring the instance behind ``client`` to ``models``. ``document``: a plan file's content,
    applied exactly (made for ``target_identity``). ``now``: the time table families plan
    their months for (default: the current time)."""
    if document is not None:
        check_plan_document(document, target_identity, models)
        planned_prune = document["options"]["prune"]
        if options.prune and not planned_prune:
            raise ApplyRefused(
                "--prune conflicts with the plan file, which was planned without it; apply the "
                "file without --prune, or plan again with --prune"
            )
        # The plan file carries the options it was planned with.
        options = attrs.evolve(options, prune=planned_prune)
    state = State(client)
    state.ensure_table()
    note = state.acquire(options.lock_timeout_s, hooks.on_lock_wait) or ""
    try:
        # Renewed in the background from here on: index builds and rewrites may take long.
        with state.keep_lease() as lease:
            outcome = _apply_locked(client, models, state, lease, note, options, hooks,
                                    document=document, now=now)
    except BaseException:
        # The run's own error is the one to report: a release that fails too (the same full
        # disk, the same outage) must not replace it. A lock left so is stale once this process
        # exits, and the next apply takes it over.
        with contextlib.suppress(Exception):
            state.release()
        raise
    state.release()
    return outcome


def _record(state: State, step: ops.Step, status: str, plan_id: str, error: str = "") -> bool:
    """Record how a step ended, so that it is never taken for one a killed apply left; False if
    that could not be written. Tried twice: a full disk refuses the first write, and the local
    server then gives back the space it set aside for this; the second try leaves the error
    text out, a row no larger than the ``started`` one it replaces."""
    for text in (error, ""):
        try:
            state.record(step, status, plan_id=plan_id, error=text)
            return True
        except Exception:
            continue
    return False


def _continue(client: Any, state: State, rewrite: Any, settings: Any, plan_id: str) -> Any:
    """Take a rewrite an earlier run started up to ready, as a step of this run (so that its
    history says this run continued it, and how that ended)."""
    from tsmigrate.instance.records import Action

    step = Action("rewrite_table", f"continue rewrite of {rewrite.source} into {rewrite.target}",
                  rewrite.target, ops.DATA_COPY)
    state.record(step, "started", plan_id=plan_id)
    try:
        ready = planned.run(client, rewrite.target, settings)
    except KeyboardInterrupt:
        _record(state, step, "interrupted", plan_id, "interrupted (Ctrl-C)")
        raise
    except Exception as exc:
        _record(state, step, "failed", plan_id, str(exc)[:500])
        raise
    _record(state, step, "done", plan_id)
    return ready


def _apply_locked(
    client: Any, models: Catalog, state: State, lease: Lease, note: str, options: ApplyOptions,
    hooks: ApplyHooks, *, document: Mapping[str, Any] | None, now: datetime | None,
) -> Outcome:
    """With ``options.lint`` the plan is linted first and apply refuses when a finding is an
    error, except findings on a destructive step that ``allow_destructive`` acknowledges."""
    reindexing = options.reindex
    declared = {t.name: t for t in models.tables}
    interrupted = state.mark_interrupted()
    # This run takes up the work of killed applies: `history` says so on them (and how this
    # run ended). A killed rewrite command's work is its command's to run again.
    state.resumes = {e.run for e in map(Entry.from_row, interrupted) if e.command == "apply"}
    if interrupted:
        listed = "; ".join(f"{h['summary']} ({h['owner']})" for h in interrupted)
        note = "; ".join(filter(None, [note, (
            f"marked {len(interrupted)} step(s) an earlier apply left unfinished (it was "
            f"killed) as interrupted: {listed}")]))
    live = live_catalog(client)
    plan = make_plan(live, models, prune=options.prune, now=now, bookkeeping=(STATE_TABLE,),
                     finished_rewrites=finished_rewrites(client))
    ahead = planned.upcoming(client, live, models)
    plan = attrs.evolve(plan, rewrites=ahead)
    plan_id = plan.models_fingerprint[7:23]
    if document is not None:
        done = resume_point(document, plan.source_fingerprint)
        if [step_json(s) for s in plan.steps] != planned_steps(document, done):
            raise ApplyRefused("the live schema no longer leads to the planned steps; plan again")
        plan_id = document["checksum"][7:23]
        if done:
            note = "; ".join(filter(None, [note, f"resuming after step {done} of the plan"]))
    findings = run_lint(models, live=live, plan=plan, config=options.lint) if options.lint else []
    if hooks.show is not None:
        hooks.show(plan, findings)
    blocking = blocking_findings(findings, plan, allow_destructive=options.allow_destructive)
    if blocking:
        listed = "; ".join(f"{f.code} {f.where()}: {f.message}" for f in blocking)
        drops = [f for f in blocking if f.step and plan.steps[f.step - 1].risk == ops.DESTRUCTIVE]
        fix = "fix them, or set their severity in [tool.tsmigrate.lint]"
        if drops:  # a drop meant (--prune) is accepted with the flag, not by fixing the models
            fix = (f"{len(drops)} of them on destructive steps: pass --allow-destructive to accept "
                   f"those (the data is lost); {fix}" if len(drops) < len(blocking) else
                   "they are on destructive steps: pass --allow-destructive to accept them (the "
                   "data is lost), or keep the tables (declare them, or plan without --prune)")
        raise LintRefused(f"lint found {len(blocking)} error(s), so nothing was changed: {listed} ({fix})")
    destructive = plan.by_risk(ops.DESTRUCTIVE)
    if destructive and not options.allow_destructive:
        listed = "; ".join(s.summary() for s in destructive)
        raise ApplyRefused(
            f"{len(destructive)} destructive step(s) need --allow-destructive: {listed}"
        )
    unsupported = [s for s in plan.steps if not adapter.can_execute(s)
                   and not isinstance(s, (ops.RewriteTable, ops.ReindexSearchIndex))]
    if unsupported:
        raise ApplyRefused(
            f"{unsupported[0].summary()} needs an API this version cannot call yet; "
            "nothing was changed"
        )
    settings = attrs.evolve(options.rewrite, report=_renewing(state, options.rewrite.report))
    continued = planned.pending(client, live, models, ahead)
    dropped = {s.table for s in plan.steps if isinstance(s, ops.DropTable)}
    if not plan.steps:
        finished = flow.continue_unfinished(client, declared, reindexing, lease.check)
        state.save_catalog(recorded_catalog(models, live), left=physical(live))
        ready = tuple(_continue(client, state, r, settings, plan_id) for r in continued)
        return Outcome(plan, 0, note, ready, tuple(findings), reindexes=tuple(finished))
    if not hooks.confirm(plan):
        raise ApplyRefused("apply cancelled; nothing was changed")
    # The models' key derivations are recorded before the first step, so inspection shows every
    # state on the way as the plan's fingerprints predict it (and a crash midway forgets none).
    state.save_catalog(recorded_catalog(models, live), left=physical(live))
    predicted = physical(live)
    ready = []
    reindexed = []
    started = completed = 0
    try:
        for number, step in enumerate(plan.steps, 1):
            if hooks.progress is not None:
                hooks.progress(number, len(plan.steps), step)
            lease.check()
            state.record(step, "started", plan_id=plan_id)
            started = number
            try:
                with adapter.service_errors("the instance"):
                    if isinstance(step, ops.RewriteTable):
                        # Rows move, the schema does not: the rewrite's own phases replace settling.
                        planned.start(client, live, models, step)
                        ready.append(planned.run(client, step.table, settings))
                    else:
                        predicted = ops.transform(predicted, step)
                        if isinstance(step, ops.ReindexSearchIndex):
                            # A family's month is not a declared table: it has no patterns.
                            table = declared.get(step.table) or live.table(step.table)
                            reindexed.append(flow.start(client, table, step, reindexing,
                                                        lease.check))
                        else:
                            adapter.execute(client, step, predicted.table(step.table))

                        def settling(what: str, elapsed_s: float, step: ops.Step = step) -> None:
                            lease.check()  # taken over meanwhile: stop here
                            if hooks.waiting is not None:
                                hooks.waiting(step, what, elapsed_s)

                        if not adapter.settle(client, step.table, predicted.table(step.table),
                                              on_wait=settling):
                            raise ApplyRefused("it did not settle in time")
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                # Best effort: the step's own error is the one to report.
                _record(state, step, "failed", plan_id, str(exc)[:500])
                if isinstance(exc, LockHeld) or (
                        isinstance(step, ops.RewriteTable) and isinstance(exc, TsmigrateError)):
                    raise  # their own messages say where things stand and what to run next
                raise ApplyFailed(plan, number, exc) from exc
            if not _record(state, step, "done", plan_id):
                raise ApplyFailed(plan, number, "it was done, but its history row could not be written")
            completed = number
    except KeyboardInterrupt:
        current = min(completed + 1, len(plan.steps))
        if started > completed:  # its history row says "started": say what became of it
            with contextlib.suppress(Exception):
                state.record(plan.steps[current - 1], "interrupted", plan_id=plan_id,
                             error="interrupted (Ctrl-C)")
        raise ApplyInterrupted(plan, current, "interrupted (Ctrl-C)", interrupted=True) from None
    reindexed += flow.continue_unfinished(client, declared, reindexing, lease.check)
    ready += [_continue(client, state, r, settings, plan_id) for r in continued]
    lease.check()
    state.save_catalog(recorded_catalog(models, live, dropped), left=_left_by(live, plan))
    return Outcome(plan, len(plan.steps), note, tuple(ready), tuple(findings),
                   reindexes=tuple(reindexed))
