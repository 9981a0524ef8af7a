"""`tsmigrate restore`: load an archive of a retired month table (or any archive) back."""

from __future__ import annotations

import time
from pathlib import Path

import click

from tsmigrate.commands.common import err_console, project_option, reports_errors, with_target


@click.command(short_help="Load an archive of a retired month table back into the target.")
@click.argument("source")
@project_option
@with_target
@click.option("--table", "table_name", metavar="NAME",
              help="Restore into this table (default: the archived table's name).")
@reports_errors
def restore(source, project, choice, table_name):
    """Load the archive SOURCE (a path or an fsspec URL such as oss://bucket/x.jsonl.gz) into the
    target: the table is created from the archived schema if missing, and every cell version is
    written back with its timestamp. Running it again is harmless (same cells, same timestamps)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    from tsmigrate.instance import adapter
    from tsmigrate.instance.pipeprogress import PipeProgress
    from tsmigrate.instance.target import connect
    from tsmigrate.schema.config import load_project
    from tsmigrate.service.restore import restore_archive

    proj = load_project(Path(project) if project else None)
    target = choice.resolve(proj)
    columns = (TextColumn("restoring {task.description}"), BarColumn(), MofNCompleteColumn(),
               TaskProgressColumn(), TextColumn("{task.fields[rate]} rows/s"), TimeRemainingColumn())
    with adapter.service_errors(target.describe()), connect(proj, target) as client, \
            Progress(*columns, transient=True, console=err_console) as bar:  # stdout: the result
        task = bar.add_task(source, total=None, rate="-")
        started = time.monotonic()
        pipe = None if err_console.is_terminal else PipeProgress(err_console, f"restore {source}")

        def progress(done: int, total: int | None) -> None:
            rate = done / max(time.monotonic() - started, 1e-6)
            bar.update(task, completed=done, total=total, rate=f"{rate:,.0f}")
            if pipe is not None:
                pipe.count("load", done, total)

        try:
            result = restore_archive(client, source, table_name, progress)
        finally:
            if pipe is not None:
                pipe.stop()
    notes = []
    if result.created:
        notes.append("table created from the archived schema")
    if result.widened_s:
        notes.append(f"max_time_deviation widened to {result.widened_s} s while restoring, then set back")
    if result.expired_cells:
        notes.append(f"{result.expired_cells} cell(s) past the table's TTL were not written")
    click.echo(f"Restored {result.rows} row(s) into {result.table} on {target.describe()}."
               + "".join(f"\n  {n}" for n in notes))
