"""`tsmigrate status`: the target, its apply lock, the last apply, drift and rewrites in progress
(read calls only; the sections are in ``tsmigrate.instance.status``)."""

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
def status_command(project, choice, fmt):
    """Where the target stands: lock holder, last apply, drift, rewrites, revisions.

    Drift is the live schema against the one the last apply left (changes made outside
    tsmigrate); `tsmigrate plan` compares with the models. Exit 1 when a state row is
    malformed (the other sections are still shown).
    """
    from tsmigrate.instance.status import SECTIONS, StatusContext, collect, status_json, status_text
    from tsmigrate.schema.config import load_project

    sections = SECTIONS
    if load_project(project).versioned:
        sections = [*SECTIONS, _revisions_section(project)]
    with connected(project, choice) as (client, target):
        reports = collect(StatusContext(client, target), sections)
    if fmt == "json":
        click.echo(json.dumps(status_json(reports), indent=2))
    else:
        click.echo(status_text(reports), nl=False)
    errors = [report.error for _section, report in reports if report.error]
    if errors:
        for error in errors:
            err_console.print(f"[bold red]error:[/] {escape(error)}", markup=True)
        sys.exit(1)


def _revisions_section(project_dir):
    """The versioned workflow's section: the revision(s) the target is at, as `current` shows."""
    from tsmigrate.commands.common import script_directory
    from tsmigrate.commands.versioned import current_data, current_text
    from tsmigrate.instance.status import Report, Section
    from tsmigrate.versions import runner

    _project, directory = script_directory(project_dir)

    def read(ctx):
        data = current_data(directory, runner.read_applied(ctx.client))
        return Report(data, current_text(data).removeprefix("current: ").splitlines())

    return Section("revisions", "revisions", read)
