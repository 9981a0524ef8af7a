"""Command-line interface: thin verbs that call the library, render, and set the exit code.

Exit codes: 0 success, 1 error (problems found, bad input), 2 reserved for "changes present"
(plan --detailed-exitcode).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

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
                err_console.print(f"  [red]✗[/] {problem.where()}: {problem.message} "
                                  f"[dim]\\[{problem.rule}][/]", markup=True)
                if problem.fix:
                    err_console.print(f"      [dim]fix:[/] {problem.fix}")
            sys.exit(exc.exit_code)
        except TsmigrateError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", markup=True)
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


def _catalog(project_dir: Path | None, models: tuple[str, ...]):
    from tsmigrate.config import load_project
    from tsmigrate.discover import import_models
    from tsmigrate.model import compile_models

    project = load_project(project_dir, models)
    return compile_models(import_models(project.models, project.root))


@click.group()
@click.version_option(__version__, prog_name="tsmigrate")
def main() -> None:
    """Declarative schema-as-code and migrations for Alibaba Cloud Tablestore."""


@main.command()
@models_option
@project_option
@reports_errors
def validate(models: tuple[str, ...], project: Path | None) -> None:
    """Compile the models and check them against Tablestore's rules."""
    catalog = _catalog(project, models)
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

    catalog = _catalog(project, models)
    if fmt == "json":
        click.echo(catalog.to_json())
    else:
        click.echo(catalog_text(catalog), nl=False)


def _mount_local() -> None:
    from tsmigrate.local.cli import local

    main.add_command(local)


_mount_local()
