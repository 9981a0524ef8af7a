"""Run revisions against an instance: ``upgrade``, ``downgrade``, ``stamp`` and ``current``.

The operations a revision collects (``replay.collect``) execute through apply's machinery: the
same lock (``State.acquire``, with its lease), history rows (``State.record``: one per operation,
started then done / failed / interrupted), applied catalog (``State.save_catalog``: the schema
the applied revisions give, which keeps key derivations for plan and rewrites) and step
execution (``adapter.execute``, then ``adapter.settle``); ``rewrite_table`` runs the rewrite
engine to ready, ``backfill`` the data-migration engine (``tsmigrate.rewrite.backfill``).

Everything that can be refused is refused before the lock is taken and anything runs: an
unknown revision, two heads for ``head``, a downgrade past ``op.irreversible``, destructive
steps without ``allow_destructive``, an older package than the one that migrated the instance
last (unless ``allow_older``).

Rows kept in ``tsmigrate_state``:

- ``("revision", "applied")``: the applied revisions (a set: branches and merges need no special
  case), the current heads, and the distribution and version of the package that migrated last;
- ``("revision-log", "<ms>-<run>-<n>")``: one row per revision applied, undone or stamped, with
  the package (distribution, version) that did it;
- ``("revision-run", "<revision>")``: how many operations of a revision being run are done; a
  killed upgrade continues after them (and a backfill from its checkpoints).
"""

from __future__ import annotations

import importlib.metadata
import json
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import attrs
from packaging.version import InvalidVersion, Version

from tsmigrate.errors import ApplyRefused, TsmigrateError
from tsmigrate.instance import adapter
from tsmigrate.instance.apply import live_catalog
from tsmigrate.instance.history import LOCK_COMMANDS
from tsmigrate.instance.state import STATE_TABLE, State
from tsmigrate.planning import ops
from tsmigrate.planning.plan import recorded_catalog
from tsmigrate.reindex import flow
from tsmigrate.rewrite.planned import RewriteSettings
from tsmigrate.schema import Catalog, physical
from tsmigrate.schema.config import Project, read_pyproject
from tsmigrate.versions.errors import MigrationError, NothingToDowngrade, UnknownRevisionError
from tsmigrate.versions.op import Backfill, TransformedRewrite
from tsmigrate.versions.replay import Collected, collect
from tsmigrate.versions.scripts import ScriptDirectory

APPLIED_KEY = [("kind", "revision"), ("id", "applied")]
LOG_KIND = "revision-log"
RUN_KIND = "revision-run"


class PackageTooOld(ApplyRefused):
    """The package running the migration is older than the one that migrated the instance last."""


class RunFailed(TsmigrateError):
    """An operation of a revision failed or was interrupted; says where, and that running the
    command again continues after the last operation done."""

    def __init__(self, message: str, *, interrupted: bool = False):
        super().__init__(message)
        self.interrupted = interrupted
        if interrupted:
            self.exit_code = 130


# --- the package that migrates ---------------------------------------------------------------------


@attrs.frozen
class Package:
    """The distribution and version holding the migrations (None when unknown: a directory of
    a project whose pyproject.toml names no [project])."""

    name: str | None = None
    version: str | None = None

    def text(self) -> str:
        if self.name is None:
            return "an unversioned project"
        return f"{self.name} {self.version or '(no version)'}"


def package_of(project: Project) -> Package:
    """``migrations = "pkg:resource"``: the installed distribution that provides ``pkg``; a
    directory: the project's ``[project]`` name and version (or its installed version)."""
    spec = project.migrations
    if ":" in spec and not spec.startswith(("/", ".")):
        top = spec.partition(":")[0].split(".")[0]
        names = importlib.metadata.packages_distributions().get(top) or []
        if not names:
            return Package()
        return Package(names[0], importlib.metadata.version(names[0]))
    if project.pyproject is None:
        return Package()
    meta = read_pyproject(project.pyproject).get("project", {})
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str):
        return Package()
    version = meta.get("version")
    if not isinstance(version, str):
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = None
    return Package(name, version)


def _older(mine: Package, last: Package) -> bool:
    if mine.name is None or mine.name != last.name or not mine.version or not last.version:
        return False
    try:
        return Version(mine.version) < Version(last.version)
    except InvalidVersion:
        return False


# --- what the state table says -----------------------------------------------------------------------


@attrs.frozen
class Applied:
    revisions: frozenset[str] = frozenset()
    package: Package = Package()
    at_ms: int = 0
    owner: str = ""

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.at_ms / 1000))
        return f"{self.package.text()} at {when} ({self.owner})"


def read_applied(client: Any) -> Applied:
    try:
        row = adapter.get_row(client, STATE_TABLE, APPLIED_KEY)
    except Exception as exc:  # no state table yet: nothing applied
        if getattr(exc, "code", "") == "OTSObjectNotExist":
            return Applied()
        raise
    if not row:
        return Applied()
    try:
        revisions = json.loads(row["revisions"])
        assert isinstance(revisions, list) and all(isinstance(r, str) for r in revisions)
    except Exception:
        raise MigrationError(
            f"the applied revisions in {STATE_TABLE} (row kind='revision', id='applied') are "
            f"malformed ({row.get('revisions')!r}); set them with `tsmigrate stamp REV`"
        ) from None
    return Applied(frozenset(revisions), Package(row.get("dist") or None, row.get("version") or None),
                   int(row.get("at_ms", 0)), str(row.get("owner", "")))


def history(client: Any) -> list[dict[str, Any]]:
    """Every revision-log row, oldest first."""
    try:
        rows = adapter.scan_prefix(client, STATE_TABLE, ("kind", LOG_KIND), "id")
    except Exception as exc:
        if getattr(exc, "code", "") == "OTSObjectNotExist":
            return []
        raise
    return [{"id": row_id, **columns} for row_id, columns in rows]


# --- planning a move: offline, nothing changes ----------------------------------------------------


@attrs.frozen
class Move:
    """A move of the instance from ``start`` to ``end`` (sets of applied revisions)."""

    direction: str  # upgrade | downgrade | stamp
    target: str | None
    start: frozenset[str]
    end: frozenset[str]
    steps: tuple[Collected, ...] = ()

    @property
    def operations(self) -> list[tuple[Collected, int, Any]]:
        return [(c, i, op) for c in self.steps for i, op in enumerate(c.operations, 1)]


def catalog_of(directory: ScriptDirectory, applied: Collection[str]) -> Catalog:
    """The schema the applied revisions give, replayed offline (parents first)."""
    done = directory.graph.closure(applied)
    catalog = Catalog()
    for rev in directory.graph.topological():
        if rev in done:
            catalog = collect(directory.scripts[rev], "upgrade", catalog).catalog_after
    return catalog


def _known(directory: ScriptDirectory, applied: Collection[str]) -> frozenset[str]:
    unknown = sorted(set(applied) - set(directory.scripts))
    if unknown:
        raise UnknownRevisionError(
            f"the instance has revision(s) {', '.join(unknown)} applied that {directory.location.label} "
            "does not hold: a newer package (or another branch) migrated it; run with the "
            "migrations that include them"
        )
    return frozenset(directory.graph.closure(applied))


def plan_upgrade(directory: ScriptDirectory, applied: Collection[str], spec: str) -> Move:
    start = _known(directory, applied)
    target = directory.graph.resolve(spec, start)
    if target is None:
        return Move("upgrade", None, start, start)
    path = directory.graph.upgrade_path(start, target)
    catalog = catalog_of(directory, start)
    steps = []
    for rev in path:
        collected = collect(directory.scripts[rev], "upgrade", catalog)
        steps.append(collected)
        catalog = collected.catalog_after
    return Move("upgrade", target, start, start | set(path), tuple(steps))


def plan_downgrade(directory: ScriptDirectory, applied: Collection[str], spec: str) -> Move:
    start = _known(directory, applied)
    if not start and spec.strip().startswith("-"):
        # As alembic, whose `downgrade -1` at base fails ("Relative revision -1 didn't produce
        # 1 migrations", exit 1): a step down from nothing is an error, not a move to base.
        raise NothingToDowngrade(f"nothing to downgrade: no revision is applied ({spec.strip()!r} "
                                 "counts down from the applied revisions; `tsmigrate current` shows them)")
    target = directory.graph.resolve(spec, start)
    if target is not None and target not in start:
        raise UnknownRevisionError(
            f"revision {target} is not applied, so the instance cannot go down to it (applied "
            f"heads: {', '.join(directory.graph.current_heads(start)) or 'none'}); use "
            "`tsmigrate upgrade` to go up"
        )
    path = directory.graph.downgrade_path(start, target)
    catalog = catalog_of(directory, start)
    steps = []
    for rev in path:  # children first; IrreversibleError here, before anything runs
        collected = collect(directory.scripts[rev], "downgrade", catalog)
        steps.append(collected)
        catalog = collected.catalog_after
    return Move("downgrade", target, start, start - set(path), tuple(steps))


def plan_stamp(directory: ScriptDirectory, spec: str) -> Move:
    target = directory.graph.resolve(spec, ())
    end = frozenset(directory.graph.ancestors(target)) if target is not None else frozenset()
    return Move("stamp", target, frozenset(), end)


def check_package(package: Package, last: Applied) -> None:
    """Refuse a package older than the one that migrated the instance last (checked before the
    revisions are even read: an older package may not know the newer revisions)."""
    if _older(package, last.package):
        raise PackageTooOld(
            f"this is {package.text()}, older than {last.package.text()} that migrated the "
            f"instance last ({last.describe()}); run it with {last.package.text()} or newer, or "
            "pass --allow-older if going back is intended"
        )


def refusals(move: Move, *, allow_destructive: bool) -> None:
    """Raise when the move must not run (nothing has changed yet)."""
    destructive = [(c.revision, op) for c, _, op in move.operations if op.risk == ops.DESTRUCTIVE]
    if destructive and not allow_destructive:
        listed = "; ".join(f"{rev}: {op.summary()}" for rev, op in destructive)
        raise ApplyRefused(
            f"{len(destructive)} destructive step(s) need --allow-destructive: {listed}; "
            "nothing was changed"
        )


_CREATES = (ops.CreateTable, ops.CreateIndex, ops.CreateSearchIndex)


def _there(catalog: Catalog, op: Any) -> str | None:
    """What ``op`` (a create) would create that ``catalog`` has already, as text; None when
    nothing."""
    table = catalog.table(op.table)
    if table is None:
        return None
    if isinstance(op, ops.CreateTable):
        return f"table {op.table}"
    if isinstance(op, ops.CreateIndex) and any(i.name == op.index.name for i in table.secondary_indexes):
        return f"secondary index {op.index.name} of {op.table}"
    if isinstance(op, ops.CreateSearchIndex) and any(i.name == op.index.name for i in table.search_indexes):
        return f"search index {op.index.name} of {op.table}"
    return None


def _done_before(client: Any, collected: Collected) -> int:
    """How many operations of ``collected`` a killed run of the same direction did (they are
    skipped: the instance has them)."""
    try:
        row = adapter.get_row(client, STATE_TABLE, _run_key(collected.revision)) or {}
    except Exception as exc:  # no state table yet (a dry run on a new instance): no run either
        if getattr(exc, "code", "") == "OTSObjectNotExist":
            return 0
        raise
    return int(row.get("done", 0)) if row.get("direction") == collected.direction else 0


def check_live(client: Any, move: Move) -> None:
    """Raise ApplyRefused when an operation of ``move`` creates what the instance has already
    (made outside the revisions: `tsmigrate apply`, the console): the run would fail there
    (OTSObjectAlreadyExist), after the operations before it ran. The instance's schema is
    followed through the operations before each one (read calls only; those a killed run did
    are skipped, as the run skips them). ``upgrade --dry-run`` checks the same."""
    if not move.steps:
        return
    predicted = physical(live_catalog(client))
    for collected in move.steps:
        skip = _done_before(client, collected)
        total = len(collected.operations)
        for number, op in enumerate(collected.operations, 1):
            if number <= skip:
                continue
            there = _there(predicted, op) if isinstance(op, _CREATES) else None
            if there is not None:
                raise ApplyRefused(_exists_text(collected.revision, move.direction, number, total, op, there))
            if isinstance(op, ops.Step):
                try:
                    predicted = ops.transform(predicted, op)
                except Exception:  # past what can be predicted: the run finds out
                    return


def _exists_text(rev: str, direction: str, number: int, total: int, op: Any, there: str) -> str:
    if direction == "upgrade":
        fix = (f"If the instance already matches revision {rev}, record it as applied without "
               f"running it: `tsmigrate stamp {rev}` (then `tsmigrate upgrade head` runs the "
               "revisions after it); otherwise drop what is in the way, or write a revision that "
               "adopts it")
    else:
        fix = ("Drop what is in the way, or, if the instance already matches the revisions "
               "below, record that without running anything: `tsmigrate stamp REV`")
    return (f"{direction} of revision {rev} would fail at operation {number} of {total} "
            f"({op.summary()}): {there} exists already (OTSObjectAlreadyExist), made outside "
            f"the revisions (by `tsmigrate apply`, or by hand). {fix}; nothing was changed")


# --- the service calls, for --dry-run -----------------------------------------------------------------


def calls(move: Move, directory: ScriptDirectory) -> list[str]:
    """The service calls ``move`` makes, in order, as text (``upgrade --dry-run``)."""
    lines = [f"PutRow {STATE_TABLE} (kind='lock', id='apply') expecting the row not to exist: take "
             "the apply lock"]
    for collected in move.steps:
        script = directory.scripts[collected.revision]
        lines.append(f"# revision {collected.revision} ({script.message}): {move.direction}")
        for number, op in enumerate(collected.operations, 1):
            lines.append(f"PutRow {STATE_TABLE} history: operation {number} started")
            lines += [f"  {call}" for call in operation_calls(op)]
            lines.append(f"PutRow {STATE_TABLE} history: operation {number} done")
        lines.append(f"PutRow {STATE_TABLE} (kind='revision', id='applied') and a revision-log row: "
                     f"{collected.revision} {'applied' if move.direction == 'upgrade' else 'undone'}")
        lines.append(f"PutRow {STATE_TABLE} (kind='catalog', id='applied'): the schema after it")
    if move.direction == "stamp":
        lines.append(f"PutRow {STATE_TABLE} (kind='revision', id='applied'): "
                     f"{', '.join(sorted(move.end)) or 'no revision'} (nothing else runs)")
    lines.append(f"DeleteRow {STATE_TABLE} (kind='lock', id='apply'): release the lock")
    return lines


def operation_calls(op: Any) -> list[str]:
    if isinstance(op, Backfill):
        reads = ", ".join(op.columns) if op.columns is not None else "every column"
        return [f"ComputeSplitPointsBySize {op.table}: key ranges for the workers",
                f"GetRange {op.table} over each range (reads the key and {reads}), "
                f"{op.reference.rpartition(':')[2]} run on each row",
                f"BatchWriteRow {op.table}: UpdateRow of the columns it changes, expecting each "
                "row to exist; checkpoints in tsmigrate_state after each page"]
    if isinstance(op, TransformedRewrite):
        return _rewrite_calls(op.step, f" (keys through {op.reference.rpartition(':')[2]})")
    if isinstance(op, ops.RewriteTable):
        return _rewrite_calls(op, "")
    return adapter.calls(op)


def _rewrite_calls(step: ops.RewriteTable, how: str) -> list[str]:
    return [f"UpdateTable {step.source}: stream on (change capture)",
            f"ComputeSplitPointsBySize {step.source}; GetRange {step.source} over each range; "
            f"BatchWriteRow {step.table}: every row with its key rebuilt{how}",
            f"GetStreamRecord {step.source}: capture; GetRange both tables: verification; the "
            f"rewrite is left ready (`tsmigrate rewrite finish {step.table}` cuts over)"]


# --- running a move ---------------------------------------------------------------------------------


@attrs.frozen
class MoveOptions:
    """How upgrade, downgrade and stamp run, as their flags ask: whether destructive operations
    may run (``allow_destructive``) and an older package may move the instance
    (``allow_older``), how long to wait for a lock another run holds, and how data operations
    run (the rewrite engine's and the reindex flow's settings, a backfill's progress)."""

    allow_destructive: bool = False
    allow_older: bool = False
    lock_timeout_s: float = 0.0
    rewrite: RewriteSettings = attrs.field(factory=RewriteSettings)
    reindex: flow.ReindexSettings = attrs.field(factory=flow.ReindexSettings)
    backfill_progress: Callable[[Any], None] | None = None


Progress = Callable[[str, int, int, Any], None]  # (revision, number, total, operation)


@attrs.frozen
class Outcome:
    move: Move
    executed: int  # operations run by this call
    note: str = ""
    rewrites: tuple[Any, ...] = ()


def run(client: Any, directory: ScriptDirectory, make_move: Callable[[Applied], Move],
        options: MoveOptions = MoveOptions(), *, package: Package,
        on_lock_wait: Callable[[Any], None] | None = None,
        progress: Progress | None = None) -> Outcome:
    """Take apply's lock, read what is applied, plan the move (``make_move``), refuse what must
    not run, then run each revision's operations and record them."""
    state = State(client)
    state.ensure_table()
    note = state.acquire(options.lock_timeout_s, on_lock_wait) or ""
    try:
        with state.keep_lease() as lease:
            last = read_applied(client)
            if not options.allow_older:
                check_package(package, last)
            move = make_move(last)
            refusals(move, allow_destructive=options.allow_destructive)
            check_live(client, move)
            # `history` names the run by its command and the revisions it moves between.
            state.command, state.revisions = move.direction, move_text(directory, move)
            interrupted = state.mark_interrupted()
            # `history` names this run on the killed ones it takes up (issue 24).
            state.resumes = {r["id"].split("-")[1] for r in interrupted
                             if (r.get("command") or "apply") in LOCK_COMMANDS and r["id"].count("-") == 2}
            if interrupted:
                note = "; ".join(filter(None, [note, f"marked {len(interrupted)} operation(s) a killed "
                                                     "run left unfinished as interrupted"]))
            executed, rewrites = 0, []
            applied = set(move.start)
            for collected in move.steps:
                done, ready = _run_revision(client, directory, state, lease, collected, options, progress)
                executed += done
                rewrites += ready
                if move.direction == "upgrade":
                    applied.add(collected.revision)
                else:
                    applied.discard(collected.revision)
                _record(client, directory, state, applied, collected.revision, move.direction, package)
            if move.direction == "stamp":
                applied = set(move.end)
                _record(client, directory, state, applied, move.target or "base", "stamp", package)
            return Outcome(move, executed, note, tuple(rewrites))
    finally:
        state.release()


def move_text(directory: ScriptDirectory, move: Move) -> str:
    """``from -> to``: the heads the move starts and ends at (``base`` for none)."""
    def heads(applied: frozenset[str]) -> str:
        return ", ".join(directory.graph.current_heads(applied)) if applied else "base"

    return f"{heads(move.start)} -> {heads(move.end)}"


def _run_key(rev: str) -> list[tuple[str, Any]]:
    return [("kind", RUN_KIND), ("id", rev)]


def _run_revision(client: Any, directory: ScriptDirectory, state: State, lease: Any,
                  collected: Collected, options: MoveOptions, progress: Progress | None
                  ) -> tuple[int, list[Any]]:
    from tsmigrate.rewrite import backfill, machine, planned

    rev, direction = collected.revision, collected.direction
    row = adapter.get_row(client, STATE_TABLE, _run_key(rev)) or {}
    skip = int(row.get("done", 0)) if row.get("direction") == direction else 0
    operations = list(collected.operations)
    live = live_catalog(client)
    predicted = physical(live)
    executed, ready = 0, []
    for number, op in enumerate(operations, 1):
        if number <= skip:
            continue  # done by a run that was killed after it
        if progress is not None:
            progress(rev, number, len(operations), op)
        lease.check()
        state.record(op, "started", plan_id=rev)
        try:
            with adapter.service_errors("the instance"):
                if isinstance(op, Backfill):
                    key = f"{rev}/{direction}/{number:03d}"
                    table = adapter.inspect_table(client, op.table)
                    job = backfill.start_or_resume(client, key, table, op.reference, op.columns)
                    rewrite_settings = options.rewrite
                    spec = rewrite_settings.spec_for(client)
                    run_options = backfill.RunOptions(rewrite_settings.options.workers,
                                                      rewrite_settings.options.dask,
                                                      rewrite_settings.options.max_rows_per_s)
                    backfill.run(client, spec, job, run_options, options.backfill_progress)
                elif isinstance(op, (TransformedRewrite, ops.RewriteTable)):
                    step = op.step if isinstance(op, TransformedRewrite) else op
                    existing = machine.load(client, step.table)
                    if existing is None or not existing.active:
                        custom = op.reference if isinstance(op, TransformedRewrite) else None
                        planned.start(client, live_catalog(client), collected.catalog_after, step, custom)
                    ready.append(planned.run(client, step.table, options.rewrite))
                elif isinstance(op, ops.ReindexSearchIndex):
                    # The index keeps serving while it is rebuilt: apply's reindex flow, stages
                    # checkpointed, so a killed upgrade resumes it.
                    predicted = ops.transform(predicted, op)
                    table = collected.catalog_after.table(op.table) or predicted.table(op.table)
                    flow.start(client, table, op, options.reindex, lease.check)
                else:
                    predicted = ops.transform(predicted, op)
                    adapter.execute(client, op, predicted.table(op.table))
                    if not adapter.settle(client, op.table, predicted.table(op.table),
                                          on_wait=lambda what, s: lease.check()):
                        raise ApplyRefused("it did not settle in time")
        except KeyboardInterrupt:
            state.record(op, "interrupted", plan_id=rev, error="interrupted (Ctrl-C)")
            raise RunFailed(_where(rev, direction, number, len(operations), op, "interrupted"),
                            interrupted=True) from None
        except Exception as exc:
            state.record(op, "failed", plan_id=rev, error=str(exc)[:500])
            if direction == "upgrade" and _exists_already(exc, op):
                raise RunFailed(_made_outside(rev, number, len(operations), op, exc)) from exc
            raise RunFailed(
                _where(rev, direction, number, len(operations), op, "failed") + f": {exc}"
            ) from exc
        state.record(op, "done", plan_id=rev)
        adapter.put_row(client, STATE_TABLE, _run_key(rev), {"direction": direction, "done": number})
        executed += 1
        if not isinstance(op, ops.Step) or isinstance(op, ops.RewriteTable):
            predicted = physical(live_catalog(client))
    for number, op in enumerate(operations, 1):
        if isinstance(op, Backfill):
            backfill.forget(client, f"{rev}/{direction}/{number:03d}")
    return executed, ready


def _where(rev: str, direction: str, number: int, total: int, op: Any, what: str) -> str:
    before = f"operations 1-{number - 1} were done" if number > 2 else (
        "operation 1 was done" if number == 2 else "no operation of it was done")
    return (f"{direction} of revision {rev} {what} at operation {number} of {total} "
            f"({op.summary()}); {before}, and running it again continues from there")


def _exists_already(exc: BaseException, op: Any) -> bool:
    """A create of the revision found its object there: made outside the revisions (`tsmigrate
    apply`, the console), so running the revision again fails the same way."""
    import tablestore as ts

    # adapter.service_errors turned the SDK's error into a TargetError "from None": its context.
    answer = exc if isinstance(exc, ts.OTSServiceError) else exc.__context__
    return isinstance(op, _CREATES) and isinstance(answer, ts.OTSServiceError) and (
        answer.code == "OTSObjectAlreadyExist")


def _made_outside(rev: str, number: int, total: int, op: Any, exc: BaseException) -> str:
    before = f"operations 1-{number - 1} were done" if number > 2 else (
        "operation 1 was done" if number == 2 else "no operation of it was done")
    return (
        f"upgrade of revision {rev} failed at operation {number} of {total} ({op.summary()}): "
        f"{str(exc).rstrip('.')}; {before}. What it creates exists already, made outside the revisions "
        "(by `tsmigrate apply`, or by hand), so running upgrade again fails the same way. If the "
        f"instance already matches revision {rev}, record it as applied without running it: "
        f"`tsmigrate stamp {rev}` (then `tsmigrate upgrade head` runs the revisions after it); "
        "otherwise drop what is in the way, or write a revision that adopts it"
    )


def _record(client: Any, directory: ScriptDirectory, state: State, applied: set[str], rev: str,
            direction: str, package: Package) -> None:
    """The applied set, a log row, and the schema the applied revisions give."""
    now = int(time.time() * 1000)
    heads = directory.graph.current_heads(applied) if applied else ()
    who = {"dist": package.name or "", "version": package.version or "", "owner": state.owner.text,
           "at_ms": now}
    adapter.put_row(client, STATE_TABLE, APPLIED_KEY,
                    {"revisions": json.dumps(sorted(applied)), "heads": json.dumps(list(heads)), **who})
    message = directory.scripts[rev].message if rev in directory.scripts else ""
    log_id = f"{now:013d}-{state.owner.run_id}-{rev}"
    adapter.put_row(client, STATE_TABLE, [("kind", LOG_KIND), ("id", log_id)],
                    {"revision": rev, "direction": direction, "message": message, **who})
    live = live_catalog(client)  # the schema this revision left: status checks drift against it
    state.save_catalog(recorded_catalog(catalog_of(directory, applied), live), left=physical(live))
    adapter.delete_row(client, STATE_TABLE, _run_key(rev))


def current_heads(directory: ScriptDirectory, applied: Applied) -> Sequence[str]:
    return directory.graph.current_heads(_known(directory, applied.revisions))
