"""`tsmigrate history`: the steps applies recorded on the target, newest first; or, with
``--revisions`` (the default when ``[tool.tsmigrate] workflow = "versioned"``), the revision
scripts, newest first (no instance needed)."""

from __future__ import annotations

import json

import click

from tsmigrate.commands.common import connected, project_option, reports_errors, with_target

DEFAULT_LIMIT = 20


@click.command(name="history")
@project_option
@with_target
@click.option("--limit", type=click.IntRange(min=1), default=DEFAULT_LIMIT, show_default=True,
              metavar="N", help="Show the N newest steps.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--revisions/--runs", "revisions", default=None,
              help="List the revision scripts (versioned migrations, no instance needed) / the "
                   "runs applied to the target. Default: --revisions when [tool.tsmigrate] "
                   "workflow is \"versioned\", else --runs.")
@reports_errors
def history_command(project, choice, limit, fmt, revisions):
    """Steps applied to the target, newest first: run, outcome, when and who ran them.

    With --revisions (the default in versioned mode): the revision scripts, newest first, each
    as `parents -> revision (head, merge)  message`.
    """
    from tsmigrate.instance.history import history_json, history_text, live_owner, newest_first, runs
    from tsmigrate.instance.state import State

    if revisions is None:
        from tsmigrate.schema.config import load_project

        revisions = load_project(project).settings.get("workflow") == "versioned"
    if revisions:
        from tsmigrate.commands.common import script_directory
        from tsmigrate.commands.revisions import revision_history

        _, directory = script_directory(project)
        click.echo(revision_history(directory, fmt, limit), nl=False)
        return

    with connected(project, choice) as (client, target):
        state = State(client)
        rows = state.history()
        lock = state.read_lock() if rows else None
        runners = _rewrite_runners(client) if rows else set()
    all_runs = runs(newest_first(rows), live_owner(lock), runners)
    if fmt == "json":
        click.echo(json.dumps(history_json(target.describe(), all_runs, limit), indent=2))
    else:
        click.echo(history_text(target.describe(), all_runs, limit), nl=False)


def _rewrite_runners(client: object) -> set[str]:
    """The processes driving rewrites now (their commands' runs are running); none when the
    rewrite rows cannot be read (`tsmigrate rewrite status` names a malformed one)."""
    from tsmigrate.errors import TsmigrateError
    from tsmigrate.instance.history import rewrite_runners
    from tsmigrate.rewrite import machine

    try:
        return rewrite_runners(machine.all_rewrites(client))
    except TsmigrateError:
        return set()
