"""`tsmigrate upgrade`, `downgrade`, `current`, `stamp`: move the target along the revisions.

Every refusal (an unknown revision, two heads, a downgrade past an irreversible step, a
destructive step without --allow-destructive, an older package, a create of what the instance
has already, ``downgrade -N`` with nothing applied) is one message, exit 1, and nothing is
changed. ``--dry-run`` prints the service calls instead of making them.
"""

from __future__ import annotations

import functools
import sys
import time
from typing import Any

import attrs
import click
from rich.console import Console

from tsmigrate.commands.common import (
    err_console,
    project_option,
    reports_errors,
    script_directory,
    with_target,
)

run_options = [
    click.option("--allow-destructive", is_flag=True,
                 help="Allow steps that lose data (a dropped table, a lowered TTL, ...)."),
    click.option("--workers", type=click.IntRange(min=1), default=4, show_default=True,
                 help="Parallel key ranges of a backfill or a rewrite."),
    click.option("--dask", metavar="ADDRESS", help="Run backfill and rewrite tasks on this Dask scheduler."),
    click.option("--max-rows-per-s", type=click.FloatRange(min=1), default=None,
                 help="Throttle backfill and rewrite writes."),
    click.option("--lock-timeout", type=click.FloatRange(min=0), default=0, metavar="SECONDS",
                 help="Wait up to this long for a lock another run holds (default: fail at once)."),
    click.option("--dry-run", is_flag=True, help="Print the service calls it would make; change nothing."),
]


def with_run_options(command: Any) -> Any:
    """The run flags (and --allow-older where the command has it), handed to the command as one
    ``options`` (``tsmigrate.versions.runner.MoveOptions``); --dry-run stays a flag of its own."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from tsmigrate.rewrite import driver
        from tsmigrate.rewrite.planned import RewriteSettings
        from tsmigrate.versions.runner import MoveOptions

        run = driver.RunOptions(kwargs.pop("workers"), kwargs.pop("dask"), kwargs.pop("max_rows_per_s"))
        kwargs["options"] = MoveOptions(
            allow_destructive=kwargs.pop("allow_destructive"), allow_older=kwargs.pop("allow_older", False),
            lock_timeout_s=kwargs.pop("lock_timeout"), rewrite=RewriteSettings(options=run))
        return command(*args, **kwargs)

    for option in reversed(run_options):
        wrapper = option(wrapper)
    return wrapper


class _Report:
    """One line per operation, and the rewrite engine's progress bar for backfills and rewrites."""

    def __init__(self, console: Console) -> None:
        from tsmigrate.rewrite.progress import ApplyProgress

        self.console = console
        self.bars = ApplyProgress(err_console)

    def operation(self, rev: str, number: int, total: int, op: Any) -> None:
        self.bars.close()
        self.console.print(f"  {rev} [{number}/{total}] {op.summary()}", markup=False, highlight=False)

    def backfill(self, progress: Any) -> None:
        self.bars("backfill", {"progress": progress})


def _move(command: str, project_dir: Any, choice: Any, make_move: Any, options: Any,
          dry_run: bool) -> None:
    from tsmigrate.errors import ApplyRefused
    from tsmigrate.instance import adapter
    from tsmigrate.instance.target import connect
    from tsmigrate.rewrite import driver
    from tsmigrate.versions import runner

    project, directory = script_directory(project_dir)
    target = choice.resolve(project)
    package = runner.package_of(project)
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[dim]target: {target.describe()}; migrations: {directory.location.label}; "
                  f"package: {package.text()}[/]")
    with adapter.service_errors(target.describe()), connect(project, target) as client:
        if dry_run:
            last = runner.read_applied(client)
            if not options.allow_older:
                runner.check_package(package, last)
            move = make_move(directory, last)
            try:  # a dry run shows the calls either way, and says what the run would refuse
                runner.refusals(move, allow_destructive=options.allow_destructive)
                runner.check_live(client, move)  # against the instance, as the run checks
                refused = ""
            except ApplyRefused as exc:
                refused = str(exc).removesuffix("; nothing was changed")
            _describe(console, directory, move)
            for line in runner.calls(move, directory):
                click.echo(line)
            if refused:
                err_console.print(f"note: without --dry-run this is refused: {refused}", markup=False)
            return
        report = _Report(console)
        options = attrs.evolve(
            options, backfill_progress=report.backfill,
            rewrite=attrs.evolve(options.rewrite, report=report.bars,
                                 spec=driver.spec_of(client, local_defaults=target.embedded)))

        def on_lock_wait(holder: Any) -> None:
            err_console.print(f"waiting up to {options.lock_timeout_s:.0f} s for the lock held by "
                              f"{holder.describe()}", markup=False)

        try:
            outcome = runner.run(
                client, directory, lambda last: make_move(directory, last), options,
                package=package, on_lock_wait=on_lock_wait, progress=report.operation)
        finally:
            report.bars.close()
    if outcome.note:
        console.print(f"[dim]{outcome.note}[/]")
    move = outcome.move
    if move.direction == "stamp":
        console.print(f"[bold green]Stamped[/] {move.target or 'base'}: nothing was run.")
    elif not move.steps:
        console.print(f"[bold green]Nothing to do.[/] The instance is at {_heads(directory, move.end)}.")
    else:
        revs = ", ".join(c.revision for c in move.steps)
        verb = "Upgraded" if move.direction == "upgrade" else "Downgraded"
        console.print(f"[bold green]{verb}[/] through {len(move.steps)} revision(s) ({revs}), "
                      f"{outcome.executed} operation(s) run; now at {_heads(directory, move.end)}.")
    for rewrite in outcome.rewrites:
        console.print(f"rewrite {rewrite.source} -> {rewrite.target}: {rewrite.phase}; next: "
                      f"`tsmigrate rewrite finish {rewrite.target}` once services use it")


def _heads(directory: Any, applied: Any) -> str:
    heads = directory.graph.current_heads(applied) if applied else ()
    return ", ".join(heads) or "base"


def _describe(console: Console, directory: Any, move: Any) -> None:
    if move.direction == "stamp":
        console.print(f"stamp {move.target or 'base'} (dry run)")
        return
    revs = ", ".join(c.revision for c in move.steps) or "nothing to do"
    console.print(f"{move.direction} {_heads(directory, move.start)} -> {_heads(directory, move.end)}: "
                  f"{revs} (dry run: the service calls it would make)")


@click.command()
@click.argument("revision", default="head")
@project_option
@with_target
@with_run_options
@click.option("--allow-older", is_flag=True,
              help="Run even with an older package than the one that migrated the instance last.")
@reports_errors
def upgrade(revision, project, choice, options, dry_run):
    """Apply revisions up to REVISION (head, an id or a prefix, +N)."""
    from tsmigrate.versions import runner

    _move("upgrade", project, choice,
          lambda directory, last: runner.plan_upgrade(directory, last.revisions, revision),
          options, dry_run)


@click.command(context_settings={"ignore_unknown_options": True})  # -1 is a revision, not an option
@click.argument("revision")
@project_option
@with_target
@with_run_options
@reports_errors
def downgrade(revision, project, choice, options, dry_run):
    """Undo revisions down to REVISION (an id or a prefix, -N, base)."""
    from tsmigrate.versions import runner

    _move("downgrade", project, choice,
          lambda directory, last: runner.plan_downgrade(directory, last.revisions, revision),
          attrs.evolve(options, allow_older=True), dry_run)


@click.command()
@click.argument("revision")
@project_option
@with_target
@click.option("--allow-older", is_flag=True,
              help="Stamp even with an older package than the one that migrated the instance last.")
@click.option("--dry-run", is_flag=True, help="Print the service calls it would make.")
@reports_errors
def stamp(revision, project, choice, allow_older, dry_run):
    """Record REVISION (head, an id, base) as applied without running anything."""
    from tsmigrate.versions import runner

    _move("stamp", project, choice,
          lambda directory, last: runner.plan_stamp(directory, revision),
          runner.MoveOptions(allow_older=allow_older), dry_run)


@click.command()
@project_option
@with_target
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@reports_errors
def current(project, choice, fmt):
    """Show the revision(s) the target is at, and the package that migrated it last."""
    import json

    from tsmigrate.instance import adapter
    from tsmigrate.instance.target import connect
    from tsmigrate.versions import runner

    proj, directory = script_directory(project)
    target = choice.resolve(proj)
    with adapter.service_errors(target.describe()), connect(proj, target) as client:
        data = current_data(directory, runner.read_applied(client))
    if fmt == "json":
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"target: {target.describe()}")
    click.echo(current_text(data))


def current_data(directory: Any, applied: Any) -> dict[str, Any]:
    """What `current` and `status` show about the revisions applied."""
    unknown = sorted(applied.revisions - set(directory.scripts))
    known = applied.revisions - set(unknown)
    heads = list(directory.graph.current_heads(known)) if known else []
    graph_heads = list(directory.graph.heads)
    return {
        "heads": [{"revision": h, "message": directory.scripts[h].message, "head": h in graph_heads}
                  for h in heads],
        "unknown": unknown,
        "pending": len(directory.graph.upgrade_path(known, graph_heads[0]))
        if len(graph_heads) == 1 and not unknown else None,
        "migrated_by": {"dist": applied.package.name, "version": applied.package.version,
                        "at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(applied.at_ms / 1000))
                        if applied.at_ms else None, "owner": applied.owner or None},
    }


def current_text(data: dict[str, Any]) -> str:
    lines = []
    if not data["heads"] and not data["unknown"]:
        lines.append("current: base (no revision applied)")
    for head in data["heads"]:
        mark = " (head)" if head["head"] else ""
        lines.append(f"current: {head['revision']}{mark} {head['message']}")
    for rev in data["unknown"]:
        lines.append(f"current: {rev} (not in these migrations: applied by a newer package?)")
    if data["pending"]:
        lines.append(f"pending: {data['pending']} revision(s) (tsmigrate upgrade head)")
    by = data["migrated_by"]
    if by["at"]:
        package = f"{by['dist']} {by['version'] or ''}".strip() if by["dist"] else "an unversioned project"
        lines.append(f"migrated last by {package} at {by['at']} ({by['owner']})")
    return "\n".join(lines)


def _uncaptured(project: Any, head: Any) -> list[Any]:
    """The steps that would bring the schema at head (``head``) to the models: changes made to
    the models that no revision captures yet (what `tsmigrate check` reports, exit 7)."""
    from tsmigrate.commands.common import load_catalog
    from tsmigrate.planning.plan import make_plan
    from tsmigrate.versions.check import without_families

    # Revisions written by hand need no models: compare only the models the project declares.
    declared_here = "models" in project.settings or any(
        (project.root / name).is_dir() or (project.root / f"{name}.py").is_file()
        for name in project.models)
    if not declared_here:
        return []
    _, declared = load_catalog(project.root, project.models)
    versioned = without_families(declared, head)
    return list(make_plan(versioned.schema, versioned.models, prune=True).steps)


def versioned_plan(project: Any, choice: Any, fmt: str,
                   detailed_exitcode: bool) -> None:
    """`plan` in a versioned project: the revisions `upgrade head` would run, and any drift
    between the instance and the schema its applied revisions give (head's, once upgraded)."""
    import json

    from tsmigrate.commands.common import EXIT_CHANGES
    from tsmigrate.instance import adapter
    from tsmigrate.instance.apply import live_catalog
    from tsmigrate.instance.state import STATE_TABLE
    from tsmigrate.instance.target import connect
    from tsmigrate.planning.plan import make_plan
    from tsmigrate.planning.planrender import plan_text
    from tsmigrate.versions import runner
    from tsmigrate.versions.scripts import ScriptDirectory

    directory = ScriptDirectory.from_project(project)
    target = choice.resolve(project)
    with adapter.service_errors(target.describe()), connect(project, target) as client:
        applied = runner.read_applied(client)
        live = live_catalog(client)
    data = current_data(directory, applied)
    known = applied.revisions - set(data["unknown"])
    heads = directory.graph.heads
    pending = []
    catalog = runner.catalog_of(directory, known)
    if len(heads) == 1 and not data["unknown"]:
        for rev in directory.graph.upgrade_path(known, heads[0]):
            collected = runner.collect(directory.scripts[rev], "upgrade", catalog)
            pending.append(collected)
            catalog = collected.catalog_after
    drift = make_plan(live, runner.catalog_of(directory, known), bookkeeping=(STATE_TABLE,))
    uncaptured = _uncaptured(project, catalog) if len(heads) == 1 and not data["unknown"] else []
    if fmt == "json":
        click.echo(json.dumps({
            "workflow": "versioned", "target": target.describe(), **data,
            "heads_of_chain": list(heads),
            "pending": [{"revision": c.revision, "message": directory.scripts[c.revision].message,
                         "operations": [op.to_dict() for op in c.operations]} for c in pending],
            "drift": drift.to_dict(),
            "uncaptured": [step.summary() for step in uncaptured],
        }, indent=2))
    else:
        console = Console(highlight=False, soft_wrap=True)
        console.print(f"[dim]target: {target.describe()} (versioned workflow)[/]")
        click.echo(current_text(data))
        if len(heads) > 1:
            click.echo(f"the revisions have {len(heads)} heads ({', '.join(heads)}): `tsmigrate merge` "
                       "joins them before upgrade")
        if pending:
            click.echo(f"\n{len(pending)} revision(s) pending (tsmigrate upgrade head):")
            for collected in pending:
                click.echo(f"  {collected.revision} {directory.scripts[collected.revision].message}")
                for op in collected.operations:
                    click.echo(f"    {op.symbol:>3} {op.summary()}  [{op.risk}]")
        elif len(heads) <= 1 and not data["unknown"]:
            click.echo("\nno revision pending: the instance is at head")
        if drift.has_changes or drift.undeclared:
            click.echo("\ndrift: the instance differs from the schema of its applied revisions; "
                       "these steps would bring it back (write a revision for them, or undo the "
                       "change made outside migrations):")
            console.print(plan_text(drift), end="")
        else:
            click.echo("no drift: the instance matches the schema of its applied revisions")
        if uncaptured:
            click.echo(f"\nthe models have {len(uncaptured)} change(s) no revision captures "
                       "(tsmigrate revision --autogenerate -m ... writes them; upgrade does not "
                       "apply them until then):")
            for step in uncaptured:
                click.echo(f"  {step.symbol:>3} {step.summary()}  [{step.risk}]")
    if detailed_exitcode and (pending or drift.has_changes or uncaptured):
        sys.exit(EXIT_CHANGES)
