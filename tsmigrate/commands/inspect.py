"""`tsmigrate inspect`: the live instance's schema, or models written for it (adoption)."""

from __future__ import annotations

from pathlib import Path

import click

from tsmigrate.commands.common import inspect_target, project_option, reports_errors, with_target


@click.command(name="inspect")
@project_option
@with_target
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--write-models", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write model source for the live tables into this package directory "
              "(adoption): all files or none.")
@click.option("--overwrite", is_flag=True,
              help="With --write-models: replace model files that exist (refused otherwise).")
@reports_errors
def inspect_command(project, choice, fmt, write_models, overwrite):
    """Print the schema of the live instance, or write models for it.

    The fingerprint printed is the one a plan's target_fingerprint predicts after apply (key
    derivations tsmigrate recorded included). --write-models writes one module per table that
    compiles back to the live schema, derivations included, so a plan with them shows no
    changes; nothing is written when a file exists (without --overwrite) or a model would not
    compile.
    """
    from tsmigrate.schema.config import load_project
    from tsmigrate.schema.render import catalog_text

    _target, live = inspect_target(load_project(project), choice)
    if write_models is not None:
        from tsmigrate.schema.adopt import write_models as write

        for path in write(live, write_models, overwrite=overwrite):
            click.echo(f"wrote {path}")
        return
    click.echo(live.to_json() if fmt == "json" else catalog_text(live), nl=fmt == "json")
