"""`tsmigrate history`: the steps applies recorded on the target, newest first."""

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
@reports_errors
def history_command(project, target_name, endpoint, instance, limit, fmt):
    """Steps applied to the target, newest first: run, outcome, when and who ran them."""
    from tsmigrate.history import history_json, history_text, newest_first, runs
    from tsmigrate.state import State

    with connected(project, target_name, endpoint, instance) as (client, target):
        state = State(client)
        rows = state.history()
        lock = state.read_lock() if rows else None
    all_runs = runs(newest_first(rows), lock.owner if lock else None)
    if fmt == "json":
        click.echo(json.dumps(history_json(target.describe(), all_runs, limit), indent=2))
    else:
        click.echo(history_text(target.describe(), all_runs, limit), nl=False)
