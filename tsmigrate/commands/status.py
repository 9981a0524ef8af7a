"""`tsmigrate status`: the target, its apply lock, the last apply, drift and rewrites in progress
(read calls only; the sections are in ``tsmigrate.status``)."""

from __future__ import annotations

import json
import sys

import click
from rich.markup import escape

from tsmigrate.commands.common import connected, err_console, project_option, reports_errors, with_target


@click.command(name="status")
@project_option
@with_target
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@reports_errors
def status_command(project, target_name, endpoint, instance, fmt):
    """Where the target stands: lock holder, last apply, drift, rewrites in progress.

    Drift is the live schema against the one the last apply left (changes made outside
    tsmigrate); `tsmigrate plan` compares with the models. Exit 1 when a state row is
    malformed (the other sections are still shown).
    """
    from tsmigrate.status import StatusContext, collect, status_json, status_text

    with connected(project, target_name, endpoint, instance) as (client, target):
        reports = collect(StatusContext(client, target))
    if fmt == "json":
        click.echo(json.dumps(status_json(reports), indent=2))
    else:
        click.echo(status_text(reports), nl=False)
    errors = [report.error for _section, report in reports if report.error]
    if errors:
        for error in errors:
            err_console.print(f"[bold red]error:[/] {escape(error)}", markup=True)
        sys.exit(1)
