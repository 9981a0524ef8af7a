"""Command-line interface: thin verbs that call the library, render, and set the exit code.

Exit codes: 0 success, 1 error (problems found, bad input), 2 reserved for "changes present"
(plan --detailed-exitcode).
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape

from tsmigrate import __version__
from tsmigrate.errors import SchemaError, TsmigrateError

F = TypeVar("F", bound=Callable[..., Any])
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def reports_errors(command: F) -> F:
    """Print tsmigrate's typed errors plainly (no traceback) and exit with their code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except SchemaError as exc:
            err_console.print(f"[bold red]error:[/] {len(exc.problems)} schema problem(s)")
            for problem in exc.problems:
                # Messages quote user input and config keys ("[tool.tsmigrate]"): not markup.
                err_console.print(f"  [red]✗[/] {escape(problem.where())}: {escape(problem.message)} "
                                  f"[dim]\\[{escape(problem.rule)}][/]", markup=True)
                if problem.fix:
                    err_console.print(f"      [dim]fix:[/] {escape(problem.fix)}")
            sys.exit(exc.exit_code)
        except TsmigrateError as exc:
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


models_option = click.option(
    "--models",
    "models",
    multiple=True,
    metavar="MODULE",
    help="Module (or package) defining the models; repeatable. "
    "Default: [tool.tsmigrate] models in pyproject.toml.",
)
project_option = click.option(
    "--project",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Project directory (default: the one holding the nearest pyproject.toml).",
)


target_options = [
    click.option("--target", "target_name", metavar="NAME",
                 help="A target from [tool.tsmigrate.targets] in pyproject.toml."),
    click.option("--endpoint", metavar="URL", help="Instance endpoint (with --instance)."),
    click.option("--instance", metavar="NAME", help="Instance name (with --endpoint)."),
]


def with_target(command: F) -> F:
    for option in reversed(target_options):
        command = option(command)
    return command


def _catalog(project_dir: Path | None, models: tuple[str, ...], tolerate: frozenset[str] = frozenset()):
    from tsmigrate.config import load_project
    from tsmigrate.discover import import_models
    from tsmigrate.model import compile_models

    project = load_project(project_dir, models)
    return project, compile_models(import_models(project.models, project.root), tolerate=tolerate)


def _inspect(project, target_name, endpoint, instance):
    """The live catalog of the target (read calls only)."""
    from tsmigrate import adapter
    from tsmigrate.apply import live_catalog
    from tsmigrate.target import connect, resolve_target

    target = resolve_target(project, target=target_name, endpoint=endpoint, instance=instance)
    with adapter.service_errors(target.describe()), connect(project, target) as client:
        return target, live_catalog(client, target.pacer())


@click.group()
@click.version_option(__version__, prog_name="tsmigrate")
def main() -> None:
    """Declarative schema-as-code and migrations for Alibaba Cloud Tablestore."""
    # The SDK warns on every start that its optional C++ codec is missing; that is noise here.
    logging.getLogger("tablestore").setLevel(logging.ERROR)


@main.command()
@models_option
@project_option
@reports_errors
def validate(models: tuple[str, ...], project: Path | None) -> None:
    """Compile the models and check them against Tablestore's rules."""
    _project, catalog = _catalog(project, models)
    indexes = sum(len(t.secondary_indexes) + len(t.search_indexes) for t in catalog.tables)
    click.echo(
        f"ok: {len(catalog.tables)} tables, {indexes} indexes, no problems "
        f"({catalog.fingerprint()[:19]})"
    )


@main.command()
@models_option
@project_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@reports_errors
def show(models: tuple[str, ...], project: Path | None, fmt: str) -> None:
    """Print the schema the models compile to."""
    from tsmigrate.render import catalog_text

    _project, catalog = _catalog(project, models)
    if fmt == "json":
        click.echo(catalog.to_json())
    else:
        click.echo(catalog_text(catalog), nl=False)


@main.command()
@models_option
@project_option
@with_target
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text",
              show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the plan to this file (JSON, usable by apply --plan).")
@click.option("--prune", is_flag=True, help="Plan to drop tables that no model declares.")
@click.option("--detailed-exitcode", is_flag=True,
              help="Exit 2 when there are changes, 0 when there are none, 1 on error.")
@reports_errors
def plan(models, project, target_name, endpoint, instance, fmt, out, prune, detailed_exitcode):
    """Show what apply would change on the target (read calls only)."""
    from tsmigrate.apply import plan_document
    from tsmigrate.plan import make_plan
    from tsmigrate.planrender import plan_json, plan_markdown, plan_text

    proj, catalog = _catalog(project, models)
    target, live = _inspect(proj, target_name, endpoint, instance)
    result = make_plan(live, catalog, prune=prune)
    if out is not None:
        document = plan_document(result, target.identity)
        out.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if fmt == "json":
        click.echo(plan_json(result), nl=False)
    elif fmt == "markdown":
        click.echo(plan_markdown(result, title=f"tsmigrate plan: {target.describe()}"), nl=False)
    else:
        console = Console(highlight=False, soft_wrap=True)
        console.print(f"[dim]target: {target.describe()}[/]")
        console.print(plan_text(result), end="")
    if detailed_exitcode and result.has_changes:
        sys.exit(2)


def _lint_config(project):
    from tsmigrate.lint import LintConfig

    return LintConfig.from_settings(project.settings.get("lint", {}))


@main.command()
@models_option
@project_option
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text",
              show_default=True)
@reports_errors
def lint(models, project, fmt):
    """Check the models against Tablestore design rules (no instance needed).

    Exit 1 when any finding is an error. Codes, rationale and examples: docs/lint.md.
    """
    from tsmigrate.lint import ERROR, run_lint
    from tsmigrate.lint.indexes import LIMITS, PREREQUISITES
    from tsmigrate.planrender import findings_markdown, findings_text

    # Index prerequisites and limits, and concatenated keys that break order, come back as lint
    # findings (TS-IX401, TS-IX402, TS-PK306) instead of stopping the run.
    tolerate = PREREQUISITES | LIMITS | {"key-derivation.order"}
    proj, catalog = _catalog(project, models, tolerate=tolerate)
    findings = run_lint(catalog, config=_lint_config(proj))
    if fmt == "json":
        click.echo(json.dumps([f.to_dict() for f in findings], indent=2, sort_keys=True))
    elif fmt == "markdown":
        click.echo(findings_markdown(findings), nl=False)
    else:
        Console(highlight=False, soft_wrap=True).print(findings_text(findings), end="")
    if any(f.severity == ERROR for f in findings):
        sys.exit(1)


@main.command(name="apply")
@models_option
@project_option
@with_target
@click.option("--plan", "plan_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Apply exactly this plan (from plan --out); refused if the instance changed.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--allow-destructive", is_flag=True,
              help="Allow steps that lose data, versions, indexes or stream records.")
@click.option("--prune", is_flag=True, help="Also drop tables that no model declares.")
@reports_errors
def apply_command(models, project, target_name, endpoint, instance, plan_file, yes,
                  allow_destructive, prune):
    """Change the target to match the models (takes a lock, records history)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tsmigrate import adapter
    from tsmigrate.apply import ApplyRefused, apply
    from tsmigrate.planrender import plan_text
    from tsmigrate.target import connect, resolve_target

    proj, catalog = _catalog(project, models)
    target = resolve_target(proj, target=target_name, endpoint=endpoint, instance=instance)
    document = None
    if plan_file is not None:
        try:
            document = json.loads(plan_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ApplyRefused(f"cannot read plan file {plan_file}: {exc}") from None
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[dim]target: {target.describe()}[/]")

    def confirm(plan) -> bool:
        console.print(plan_text(plan), end="")
        if yes:
            return True
        if not sys.stdin.isatty():
            raise ApplyRefused("confirmation needed: run interactively, or pass --yes")
        return click.confirm(f"Apply these {len(plan.steps)} steps?", default=False)

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, transient=True) as bar:
        task = bar.add_task("applying", total=None)

        def progress(number, total, step) -> None:
            bar.update(task, total=total, completed=number - 1, description=step.summary()[:60])

        with adapter.service_errors(target.describe()), connect(proj, target) as client:
            outcome = apply(client, catalog, target_identity=target.identity, document=document,
                            allow_destructive=allow_destructive, prune=prune, confirm=confirm,
                            progress=progress, pacer=target.pacer())
    if outcome.note:
        console.print(f"[dim]{outcome.note}[/]")
    if outcome.executed:
        console.print(f"[bold green]Applied {outcome.executed} step(s).[/]")
    else:
        console.print("[bold green]No changes.[/] The instance matches the models.")


@main.command(name="inspect")
@project_option
@with_target
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--write-models", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write model source for the live tables into this package directory (adoption).")
@reports_errors
def inspect_command(project, target_name, endpoint, instance, fmt, write_models):
    """Print the schema of the live instance, or write models for it."""
    from tsmigrate.config import load_project
    from tsmigrate.render import catalog_text

    _target, live = _inspect(load_project(project), target_name, endpoint, instance)
    if write_models is not None:
        from tsmigrate.adopt import write_models as write

        for path in write(live, write_models):
            click.echo(f"wrote {path}")
        return
    click.echo(live.to_json() if fmt == "json" else catalog_text(live), nl=fmt == "json")


def _mount_local() -> None:
    from tsmigrate.local.cli import local

    main.add_command(local)


_mount_local()


if __name__ == "__main__":
    main()
