"""`tsmigrate rewrite status|follow|pause|resume|finish|abort`: watch and steer key-changing
rewrites that `tsmigrate apply` started (their state lives in the instance's tsmigrate_state)."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console

from tsmigrate.commands.common import connected, err_console, project_option, reports_errors, with_target
from tsmigrate.commands.group import Group

console = Console(highlight=False, soft_wrap=True)


def _rewrite_of(client: Any, table: str) -> Any:
    from tsmigrate.rewrite import machine

    rewrite = machine.load(client, table) or machine.in_progress(client, table)
    if rewrite is None:
        raise machine.RewriteError(
            f"no rewrite into or out of {table} (tsmigrate rewrite status lists them)"
        )
    return rewrite


@click.group(cls=Group)
def rewrite() -> None:
    """Watch and steer key-changing rewrites (started by apply)."""


@rewrite.command()
@click.argument("table", required=False)
@project_option
@with_target
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@reports_errors
def status(table, project, target_name, endpoint, instance, fmt):
    """Phase, rows copied / estimated, rows/s, capture lag, ETA, collisions, verification."""
    from tsmigrate.rewrite import machine
    from tsmigrate.rewrite.progress import status_data, status_text

    with connected(project, target_name, endpoint, instance) as (client, _target):
        rewrites = [_rewrite_of(client, table)] if table else machine.all_rewrites(client)
        data = [status_data(client, r) for r in rewrites]
    if fmt == "json":
        click.echo(json.dumps(data if not table else data[0], indent=2, sort_keys=True))
    elif not data:
        console.print("No rewrites.")
    else:
        console.print("\n\n".join(status_text(d) for d in data), markup=False)


@rewrite.command()
@click.argument("table")
@project_option
@with_target
@click.option("--for", "seconds", type=click.FloatRange(min=0), default=None,
              help="Stop after this many seconds (default: until interrupted).")
@reports_errors
def follow(table, project, target_name, endpoint, instance, seconds):
    """Keep change capture running (lag shown) while services move to the new model."""
    import time

    from tsmigrate.rewrite import driver, machine

    last = [0.0]

    def report(event: str, data: dict[str, Any]) -> None:
        if event == "capture" and time.monotonic() - last[0] > 2:
            last[0] = time.monotonic()
            err_console.print(f"capture lag {data['lag_s']:.1f}s, applied {data['applied']:,}, "
                              f"moved {data['moved']:,}")

    with connected(project, target_name, endpoint, instance) as (client, _target):
        rewrite = _rewrite_of(client, table)
        with machine.Runner(client, rewrite.target) as runner:
            try:
                driver.follow(client, runner, seconds, report)
            except KeyboardInterrupt:
                err_console.print("stopped; the capture position is saved")
            current = runner.rewrite
    console.print(f"{current.target}: capture followed {current.source} "
                  f"(lag {current.get('capture_lag_s', 0):.1f}s). "
                  f"Next: tsmigrate rewrite finish {current.target} once every service uses it.")


@rewrite.command()
@click.argument("table")
@project_option
@with_target
@reports_errors
def pause(table, project, target_name, endpoint, instance):
    """Pause the rewrite; the process running it stops at its next checkpoint."""
    from tsmigrate.rewrite import machine

    with connected(project, target_name, endpoint, instance) as (client, _target):
        rewrite = _rewrite_of(client, table)
        if rewrite.phase not in machine.RUNNING_PHASES:
            raise machine.RewriteError(f"the rewrite into {rewrite.target} is {rewrite.phase}; "
                                       "only a running rewrite can be paused")
        paused = machine.request(client, rewrite.target, machine.PAUSED)
    console.print(f"{paused.target}: paused in {paused.resume_to}. "
                  f"Next: tsmigrate rewrite resume {paused.target}")


@rewrite.command()
@click.argument("table")
@project_option
@with_target
@click.option("--workers", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--dask", metavar="ADDRESS", help="Run the backfill's split tasks on this Dask scheduler.")
@click.option("--max-rows-per-s", type=click.FloatRange(min=1), default=None,
              help="Throttle the backfill's writes.")
@reports_errors
def resume(table, project, target_name, endpoint, instance, workers, dask, max_rows_per_s):
    """Resume a paused or failed rewrite: continue it up to ready."""
    from tsmigrate.rewrite import driver, machine
    from tsmigrate.rewrite.progress import NEXT_STEP, ApplyProgress

    with connected(project, target_name, endpoint, instance) as (client, target):
        rewrite = _rewrite_of(client, table)
        if rewrite.phase not in (machine.PAUSED, machine.FAILED):
            raise machine.RewriteError(f"the rewrite into {rewrite.target} is {rewrite.phase}, not "
                                       "paused or failed")
        report = ApplyProgress(err_console)
        with machine.Runner(client, rewrite.target) as runner:
            try:
                if rewrite.resume_to in (machine.READY, machine.FINISHING):
                    done = runner.save(phase=rewrite.resume_to, error=None)
                else:
                    done = driver.run_to_ready(
                        client, driver.spec_of(client, target.embedded), runner,
                        driver.RunOptions(workers, dask, max_rows_per_s), report)
            finally:
                report.close()
    console.print(f"{done.target}: {done.phase}. Next: {NEXT_STEP[done.phase].format(t=done.target)}")


@rewrite.command()
@click.argument("table")
@project_option
@with_target
@click.option("--allow-destructive", is_flag=True, help="Also drop the old table.")
@reports_errors
def finish(table, project, target_name, endpoint, instance, allow_destructive):
    """After the last writer moved: catch up, verify once more, stop capture (and drop the old
    table with --allow-destructive)."""
    from tsmigrate.rewrite import driver, machine

    with connected(project, target_name, endpoint, instance) as (client, target):
        rewrite = _rewrite_of(client, table)
        with machine.Runner(client, rewrite.target) as runner:
            done = driver.finish(client, driver.spec_of(client, target.embedded), runner,
                                 allow_destructive)
    verification = done.get("verification") or {}
    changed = verification.get("changed_meanwhile", 0)
    console.print(f"{done.target}: done. Verified against {done.source}"
                  + (f" ({changed} row(s) changed by services on the new model)" if changed else "")
                  + (f"; {done.source} dropped." if allow_destructive else
                     f"; {done.source} kept (drop it with finish --allow-destructive or "
                     "apply --prune)."))


@rewrite.command()
@click.argument("table")
@project_option
@with_target
@reports_errors
def abort(table, project, target_name, endpoint, instance):
    """Drop the target and put the source's stream back; the source's rows are untouched."""
    from tsmigrate.rewrite import driver, machine

    with connected(project, target_name, endpoint, instance) as (client, _target):
        rewrite = _rewrite_of(client, table)
        with machine.Runner(client, rewrite.target) as runner:
            aborted = driver.abort(client, runner)
    console.print(f"{aborted.target}: aborted; {aborted.target} dropped, {aborted.source} left as it was.")
