"""`tsmigrate unlock`: release the apply lock a killed or stuck apply left behind."""

from __future__ import annotations

import click

from tsmigrate.commands.common import project_option, reports_errors, with_target


@click.command(name="unlock")
@project_option
@with_target
@click.option("--force", is_flag=True,
              help="Also release a lock whose holder may still be running, or a malformed lock row.")
@reports_errors
def unlock_command(project, choice, force):
    """Release the apply lock (a live holder only with --force)."""
    from tsmigrate.instance import adapter
    from tsmigrate.instance.state import State
    from tsmigrate.instance.target import connect
    from tsmigrate.schema.config import load_project

    proj = load_project(project)
    target = choice.resolve(proj)
    with adapter.service_errors(target.describe()), connect(proj, target) as client:
        click.echo(State(client).unlock(force=force))
