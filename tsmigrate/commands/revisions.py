"""Versioned migrations, the script side: `revision`, `merge`, `heads`, `hash`, `check` (no
instance needed, except `revision --against`). Executing revisions is `tsmigrate upgrade`'s job."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.markup import escape

from tsmigrate.commands.common import (
    EXIT_LINT_ERROR,
    err_console,
    lint_config,
    load_catalog,
    models_option,
    project_option,
    reports_errors,
    script_directory,
)

# `tsmigrate check` exit codes (besides 0 and 1 for bad input), in the order checks are reported.
EXIT_SUM_MISMATCH = 4
EXIT_MULTIPLE_HEADS = 5
EXIT_REPLAY_FAILS = 6
EXIT_UNCAPTURED_CHANGES = 7


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _live_catalog(project, against: str):
    """The live schema of target ``against`` ('local': the embedded instance)."""
    from tsmigrate.commands.common import inspect_target
    from tsmigrate.instance.target import TargetChoice

    configured = against in project.settings.get("targets", {})
    name = against if configured or against != "local" else None
    return inspect_target(project, TargetChoice(name=name))


def _write_revision(directory, *, message: str, parents: list[str], bodies, expected=None) -> Path:
    """Write the script, check it loads (and replays to ``expected``), update the sum; the path."""
    from tsmigrate.errors import TsmigrateError
    from tsmigrate.planning.plan import make_plan
    from tsmigrate.versions import autogen, sumfile
    from tsmigrate.versions.check import without_families
    from tsmigrate.versions.errors import ReplayError
    from tsmigrate.versions.replay import replay
    from tsmigrate.versions.scripts import VERSIONS, ScriptDirectory

    root = directory.location.writable()
    revision = autogen.new_revision_id()
    while any(r.startswith(revision) or revision.startswith(r) for r in directory.scripts):
        revision = autogen.new_revision_id()  # keep every id a prefix of nothing else
    text = autogen.render_script(revision=revision, parents=parents, message=message,
                                 bodies=bodies, migrations_dir=root)
    versions = root / VERSIONS
    versions.mkdir(parents=True, exist_ok=True)
    path = versions / f"{revision}_{autogen.slug(message)}.py"
    path.write_text(text, encoding="utf-8")
    try:
        written = ScriptDirectory.load(directory.location.prefix, root)
        if revision not in written.scripts:
            raise ReplayError(f"the template {autogen.TEMPLATE} writes no `revision = "
                              f"{revision!r}` line")
        if expected is not None:
            versioned = without_families(expected, replay(written, revision))
            left = make_plan(versioned.schema, versioned.models, prune=True).steps
            if left:
                raise ReplayError("the script does not replay to the models' schema; still to do: "
                                  + "; ".join(s.summary() for s in left))
    except TsmigrateError as exc:
        path.unlink()
        raise ReplayError(f"the new revision script was not kept: {exc}") from None
    sumfile.write(written)
    return path


@click.command(name="revision")
@click.option("-m", "--message", required=True, help="What the revision does (its file name's slug).")
@click.option("--autogenerate", is_flag=True,
              help="Write the steps from the schema the revisions produce to the models.")
@click.option("--against", metavar="TARGET",
              help="With --autogenerate: compare the models with this target's live schema "
                   "(a [tool.tsmigrate.targets] name, or 'local') instead of the revisions'.")
@click.option("--head", "head_spec", metavar="REV",
              help="The parent revision (default: the single head).")
@models_option
@project_option
@reports_errors
def revision_command(message, autogenerate, against, head_spec, models, project):
    """Write a new revision script in migrations/versions/ and update tsmigrate.sum.

    Without --autogenerate, upgrade() and downgrade() are empty for you to write. With it, they
    hold the steps between the schema the chain of revisions produces (replayed offline, no
    instance needed) and the models; a step that cannot be undone without loss makes
    downgrade() raise with the reason until you write what to do.
    """
    from tsmigrate.errors import ConfigError
    from tsmigrate.planning.plan import make_plan
    from tsmigrate.schema import Catalog
    from tsmigrate.versions import autogen, sumfile
    from tsmigrate.versions.check import without_families
    from tsmigrate.versions.replay import replay

    if against and not autogenerate:
        raise ConfigError("--against compares the models with a live instance: it needs --autogenerate")
    if not message.strip():
        raise ConfigError("-m/--message must say what the revision does")
    proj, directory = script_directory(project, models)
    directory.location.writable()
    sumfile.verify(directory)  # never bless an edited script by rewriting the sum
    graph = directory.graph
    if head_spec:
        parent = graph.resolve(head_spec)
    else:
        parent = graph.single_head(", so the new revision's parent is ambiguous")
    parents = [parent] if parent else []
    if not autogenerate:
        bodies = autogen.Bodies("    pass", "    pass", (), ())
        path = _write_revision(directory, message=message, parents=parents, bodies=bodies)
        click.echo(f"wrote {_relative(path)} (parent: {parent or 'base'})")
        return
    _, models_catalog = load_catalog(proj.root, proj.models)
    if against:
        target, live = _live_catalog(proj, against)
        source = target.describe()
        prune = False
    else:
        live = replay(directory, parent) if parent else Catalog()
        source = f"revision {parent}" if parent else "an empty instance"
        prune = True
    versioned = without_families(models_catalog, live)
    before, declared = versioned.schema, versioned.models
    for family in versioned.families:
        click.echo(f"note: table family {family}: its month tables are planned by date "
                   "(tsmigrate plan/apply), not written into revisions")
    plan = make_plan(before, declared, prune=prune)
    steps = [s for s in plan.steps if s.kind != "retire_table"]
    if not steps:
        click.echo(f"no changes between the models and {source}; nothing written")
        return
    bodies = autogen.render_bodies(before, steps)
    expected = None if against else models_catalog
    path = _write_revision(directory, message=message, parents=parents, bodies=bodies,
                           expected=expected)
    click.echo(f"wrote {_relative(path)} (parent: {parent or 'base'}): {len(steps)} step"
               f"{'s' if len(steps) != 1 else ''} from {source} to the models")
    for step in steps:
        click.echo(f"  {step.symbol} {step.summary()}  [{step.risk}]")
    for name in (u.name for u in plan.undeclared):
        click.echo(f"  note: table {name} on the target is declared by no model (not dropped)")
    if bodies.irreversible:
        click.echo("downgrade() refuses until you write what to do instead:")
        for reason in bodies.irreversible:
            click.echo(f"  - {reason}")


@click.command(name="merge")
@click.argument("revisions", nargs=-1, required=True)
@click.option("-m", "--message", default=None, help="Default: 'merge REV, REV'.")
@project_option
@reports_errors
def merge_command(revisions, message, project):
    """Write a revision joining REVISIONS (heads of parallel branches) into one head."""
    from tsmigrate.errors import ConfigError
    from tsmigrate.versions import autogen, sumfile
    from tsmigrate.versions.replay import replay

    _, directory = script_directory(project)
    graph = directory.graph
    parents = sorted({graph.lookup(spec) for spec in revisions})
    if len(parents) < 2:
        raise ConfigError(f"merge joins two or more revisions, got {', '.join(parents)}; "
                          f"the heads are: {', '.join(graph.heads) or 'none'}")
    for rev in parents:
        others = [o for o in parents if o != rev and rev in graph.ancestors(o)]
        if others:
            raise ConfigError(f"{rev} is already an ancestor of {others[0]}: merge heads of "
                              f"separate branches (heads: {', '.join(graph.heads)})")
    stale = sumfile.differences(directory)
    bodies = autogen.Bodies("    pass", "    pass", (), ())
    path = _write_revision(directory, message=message or f"merge {', '.join(parents)}",
                           parents=parents, bodies=bodies)
    click.echo(f"wrote {_relative(path)} merging {', '.join(parents)}")
    if stale:
        click.echo(f"tsmigrate.sum rewritten; before it: {'; '.join(stale)}")
    from tsmigrate.versions.scripts import ScriptDirectory

    merged = ScriptDirectory.load(directory.location.prefix, directory.location.writable())
    try:
        replay(merged)
    except Exception as exc:  # the branches conflict: the author resolves it in the merge script
        err_console.print(f"[yellow]warning:[/] the merged branches do not replay together: {exc}; "
                          f"edit {path.name} (or a branch) until `tsmigrate check` passes",
                          markup=True, highlight=False)


@click.command(name="heads")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@project_option
@reports_errors
def heads_command(fmt, project):
    """The revisions no other revision builds on (one, unless branches need a merge)."""
    _, directory = script_directory(project)
    heads = [directory.scripts[rev] for rev in directory.graph.heads]
    if fmt == "json":
        click.echo(json.dumps([{"revision": s.revision, "message": s.message,
                                "parents": list(s.down_revisions)} for s in heads], indent=2))
        return
    if not heads:
        click.echo("no revisions yet (tsmigrate revision -m MESSAGE writes the first)")
    for script in heads:
        click.echo(f"{script.revision} (head)  {script.message}")
    if len(heads) > 1:
        joined = " ".join(h.revision for h in heads)
        click.echo(f"{len(heads)} heads: join them with `tsmigrate merge {joined}`")


@click.command(name="hash")
@project_option
@reports_errors
def hash_command(project):
    """Rewrite tsmigrate.sum for the scripts as they are (after a deliberate edit)."""
    from tsmigrate.versions import sumfile

    _, directory = script_directory(project)
    before = sumfile.differences(directory)
    path = sumfile.write(directory)
    changed = f" (it did not match: {'; '.join(before)})" if before else " (unchanged)"
    click.echo(f"wrote {_relative(path)}{changed}")


def revision_history(directory, fmt: str, limit: int | None = None) -> str:
    """The ``limit`` newest revisions (reverse graph order), for `tsmigrate history --revisions`."""
    scripts = list(reversed(directory.in_order()))[:limit]
    heads = set(directory.graph.heads)
    if fmt == "json":
        return json.dumps([{"revision": s.revision, "parents": list(s.down_revisions),
                            "message": s.message, "tsmigrate_version": s.tsmigrate_version,
                            "head": s.revision in heads, "path": s.path} for s in scripts],
                          indent=2) + "\n"
    if not scripts:
        return "no revisions yet (tsmigrate revision -m MESSAGE writes the first)\n"
    lines = []
    for script in scripts:
        parents = ", ".join(script.down_revisions) or "<base>"
        tags = []
        if script.revision in heads:
            tags.append("head")
        if len(script.down_revisions) > 1:
            tags.append("merge")
        tag = f" ({', '.join(tags)})" if tags else ""
        lines.append(f"{parents} -> {script.revision}{tag}  {script.message}")
    if limit is not None and len(directory.scripts) > limit:
        lines.append(f"(the {limit} newest of {len(directory.scripts)} revisions; --limit N for more)")
    return "\n".join(lines) + "\n"


CHECK_NAMES = {EXIT_SUM_MISMATCH: "sum", EXIT_MULTIPLE_HEADS: "heads", EXIT_REPLAY_FAILS: "replay",
               EXIT_UNCAPTURED_CHANGES: "uncaptured", EXIT_LINT_ERROR: "lint"}


@click.command(name="check")
@models_option
@project_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one object on stdout (ok, exit_code, revisions, heads, failures).")
@reports_errors
def check_command(models, project, fmt):
    """The CI gate for versioned migrations (no instance needed).

    Checks, all reported; the exit code is the first that fails, in this order:
    4 tsmigrate.sum does not match the scripts; 5 more than one head; 6 a revision does not
    replay (its upgrade or downgrade fails, leaves a schema the service refuses, or its downgrade
    does not give back its parent's schema); 7 the models have changes no revision captures;
    3 lint errors (the models', or a revision's steps'). 1: bad input (a script that does not
    import, a cycle, a missing parent, models that do not compile).
    """
    from tsmigrate.instance.apply import blocking_findings
    from tsmigrate.lint import run_lint
    from tsmigrate.planning.plan import make_plan
    from tsmigrate.versions import sumfile
    from tsmigrate.versions.check import replay_all, without_families

    proj, directory = script_directory(project, models)
    failures: list[tuple[int, str]] = []
    for problem in sumfile.differences(directory):
        failures.append((EXIT_SUM_MISMATCH, f"tsmigrate.sum: {problem} (`tsmigrate hash` after "
                                            "a deliberate edit; `tsmigrate merge` for branches)"))
    heads = directory.graph.heads
    if len(heads) > 1:
        failures.append((EXIT_MULTIPLE_HEADS, f"{len(heads)} heads ({', '.join(heads)}): join "
                                              f"them with `tsmigrate merge {' '.join(heads)}`"))
    result = replay_all(directory)
    failures += [(EXIT_REPLAY_FAILS, message) for message in result.problems]
    _, declared = load_catalog(proj.root, proj.models)
    config = lint_config(proj)
    lint_errors = [("models", f) for f in run_lint(declared, config=config) if f.severity == "error"]
    for revision, plan, before, after in result.plans:
        findings = run_lint(after, live=before, plan=plan, config=config)
        lint_errors += [(f"revision {revision} step {f.step}", f)
                        for f in blocking_findings(findings, plan, allow_destructive=True) if f.step]
    if len(heads) <= 1 and result.head is not None:
        versioned = without_families(declared, result.head)
        left = make_plan(versioned.schema, versioned.models, prune=True).steps
        if left:
            failures.append((EXIT_UNCAPTURED_CHANGES,
                             f"the models have {len(left)} change(s) no revision captures: "
                             + "; ".join(s.summary() for s in left)
                             + " (tsmigrate revision --autogenerate -m ... writes them)"))
    for where, finding in lint_errors:
        failures.append((EXIT_LINT_ERROR, f"lint {finding.code} ({where}, table {finding.table}): "
                                          f"{finding.message}"))
    count = len(directory.scripts)
    order = [EXIT_SUM_MISMATCH, EXIT_MULTIPLE_HEADS, EXIT_REPLAY_FAILS, EXIT_UNCAPTURED_CHANGES,
             EXIT_LINT_ERROR]
    code = next((code for code in order if any(c == code for c, _ in failures)), 0)
    if fmt == "json":
        click.echo(json.dumps({
            "ok": not failures, "exit_code": code, "revisions": count, "heads": list(heads),
            "failures": [{"check": CHECK_NAMES[c], "exit_code": c, "message": m} for c, m in failures],
        }, indent=2))
        sys.exit(code)
    if not failures:
        click.echo(f"ok: {count} revision{'s' if count != 1 else ''}, one head "
                   f"({heads[0] if heads else 'none'}), tsmigrate.sum matches, every revision "
                   "replays, the models match the head, no lint errors")
        return
    for _, message in failures:
        err_console.print(f"[red]✗[/] {escape(message)}", markup=True, highlight=False)
    sys.exit(code)
