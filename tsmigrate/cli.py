"""Command-line interface: thin verbs that call the library, render, and set the exit code.

Exit codes: 0 success, 1 error (problems found, bad input), 2 reserved for "changes present"
(plan --detailed-exitcode).
"""

from __future__ import annotations

import functools
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


def _catalog(project_dir: Path | None, models: tuple[str, ...]):
    from tsmigrate.config import load_project
    from tsmigrate.discover import import_models
    from tsmigrate.model import compile_models

    project = load_project(project_dir, models)
    return project, compile_models(import_models(project.models, project.root))


def _inspect(project, target_name, endpoint, instance):
    """The live catalog of the target (read calls only)."""
    from tsmigrate import adapter
    from tsmigrate.target import connect, resolve_target

    target = resolve_target(project, target=target_name, endpoint=endpoint, instance=instance)
    with adapter.service_errors(target.describe()), connect(project, target) as client:
        return target, adapter.inspect(client)


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
    from tsmigrate.plan import make_plan
    from tsmigrate.planrender import plan_json, plan_markdown, plan_text

    proj, catalog = _catalog(project, models)
    target, live = _inspect(proj, target_name, endpoint, instance)
    result = make_plan(live, catalog, prune=prune)
    if out is not None:
        out.write_text(plan_json(result), encoding="utf-8")
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


@main.command(name="inspect")
@project_option
@with_target
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@reports_errors
def inspect_command(project, target_name, endpoint, instance, fmt):
    """Print the schema of the live instance."""
    from tsmigrate.config import load_project
    from tsmigrate.render import catalog_text

    _target, live = _inspect(load_project(project), target_name, endpoint, instance)
    click.echo(live.to_json() if fmt == "json" else catalog_text(live), nl=fmt == "json")


def _mount_local() -> None:
    from tsmigrate.local.cli import local

    main.add_command(local)


_mount_local()


if __name__ == "__main__":
    main()
