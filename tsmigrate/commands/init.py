"""`tsmigrate init`: scaffold a project (pyproject.toml's [tool.tsmigrate], models/, migrations/)."""

from __future__ import annotations

from pathlib import Path

import click

from tsmigrate.commands.common import reports_errors

NEXT_STEPS = (
    ("tsmigrate validate", "check the models against every Tablestore rule"),
    ("tsmigrate plan", "see what apply would change (on the embedded local instance: no account "
                       "needed)"),
    ("tsmigrate apply", "create the tables"),
    ("tsmigrate status", "where the instance stands: lock, last apply, drift"),
)


@click.command(name="init")
@click.argument("directory", required=False, default=".",
                type=click.Path(file_okay=False, path_type=Path))
@reports_errors
def init_command(directory: Path) -> None:
    """Start a project in DIRECTORY (default: here): [tool.tsmigrate], models/, migrations/.

    Adds the [tool.tsmigrate] table to an existing pyproject.toml (or creates the file) and
    writes a models/ package with an example model and migrations/versions/. Overwrites
    nothing: when any of them exists already, it says so and changes nothing.
    """
    from tsmigrate.commands.scaffold import init_project

    root = directory.resolve()
    changes = init_project(root)
    click.echo(f"Initialised a tsmigrate project in {root}:")
    for change in changes:
        click.echo(f"  {change.describe(root)}")
    click.echo("Next:" if directory == Path(".") else f"Next, in {directory}:")
    width = max(len(command) for command, _ in NEXT_STEPS)
    for command, what in NEXT_STEPS:
        click.echo(f"  {command.ljust(width)}  {what}")
