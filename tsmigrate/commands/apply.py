"""`tsmigrate apply`: change the target to match the models."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from tsmigrate.commands.common import (
    err_console,
    load_catalog,
    models_option,
    project_option,
    reports_errors,
    with_target,
)


@click.command(name="apply")
@models_option
@project_option
@with_target
@click.option("--plan", "plan_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Apply exactly this plan (from plan --out), with the options it was planned "
              "with; refused if the instance changed.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--allow-destructive", is_flag=True,
              help="Allow steps that lose data, versions, indexes or stream records.")
@click.option("--prune", is_flag=True, help="Also drop tables that no model declares (with --plan: "
              "as the plan file says).")
@click.option("--workers", type=click.IntRange(min=1), default=4, show_default=True,
              help="Parallel split tasks of a rewrite's backfill.")
@click.option("--dask", metavar="ADDRESS",
              help="Run a rewrite's split tasks on this Dask scheduler (tcp://host:8786).")
@click.option("--max-rows-per-s", type=click.FloatRange(min=1), default=None,
              help="Throttle a rewrite's backfill writes.")
@click.option("--lock-timeout", "lock_timeout", type=click.FloatRange(min=0), default=0,
              metavar="SECONDS", help="Wait up to this long for a lock another apply holds "
              "(default: fail at once).")
@reports_errors
def apply_command(models, project, target_name, endpoint, instance, plan_file, yes,
                  allow_destructive, prune, workers, dask, max_rows_per_s, lock_timeout):
    """Change the target to match the models (takes a lock, records history)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tsmigrate import adapter
    from tsmigrate.apply import ApplyRefused, apply
    from tsmigrate.planfile import read_plan_file
    from tsmigrate.planrender import plan_text
    from tsmigrate.rewrite import driver
    from tsmigrate.rewrite.planned import RewriteSettings
    from tsmigrate.rewrite.progress import NEXT_STEP, ApplyProgress
    from tsmigrate.target import connect, resolve_target

    proj, catalog = load_catalog(project, models)
    target = resolve_target(proj, target=target_name, endpoint=endpoint, instance=instance)
    document = None
    if plan_file is not None:
        document = read_plan_file(plan_file, target.identity, catalog)
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[dim]target: {target.describe()}[/]")

    def confirm(plan) -> bool:
        console.print(plan_text(plan), end="")
        if yes:
            return True
        if not sys.stdin.isatty():
            raise ApplyRefused("confirmation needed: run interactively, or pass --yes")
        return click.confirm(f"Apply these {len(plan.steps)} steps?", default=False)

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, transient=True) as bar:
        task = bar.add_task("applying", total=None)

        def progress(number, total, step) -> None:
            bar.update(task, total=total, completed=number - 1, description=step.summary()[:60])

        def on_lock_wait(holder) -> None:
            err_console.print(f"waiting up to {lock_timeout:.0f} s for the apply lock held by "
                              f"{holder.describe()}", markup=False)

        waits = SettleReport(err_console, bar, task)
        rewrite_progress = ApplyProgress(err_console)
        with adapter.service_errors(target.describe()), connect(proj, target) as client:
            settings = RewriteSettings(
                spec=driver.spec_of(client, local_defaults=target.embedded),
                options=driver.RunOptions(workers, dask, max_rows_per_s),
                report=rewrite_progress,
            )
            try:
                outcome = apply(client, catalog, target_identity=target.identity, document=document,
                                allow_destructive=allow_destructive, prune=prune, confirm=confirm,
                                progress=progress, rewrite_settings=settings,
                                lock_timeout_s=lock_timeout, on_lock_wait=on_lock_wait,
                                waiting=waits)
            finally:
                rewrite_progress.close()
    if outcome.note:
        console.print(f"[dim]{outcome.note}[/]")
    if outcome.executed:
        console.print(f"[bold green]Applied {outcome.executed} step(s).[/]")
    elif not outcome.rewrites:
        console.print("[bold green]No changes.[/] The instance matches the models.")
    for rewrite in outcome.rewrites:
        console.print(f"[bold]rewrite {rewrite.source} -> {rewrite.target}: {rewrite.phase}[/] "
                      "(copied, capturing changes, verified).")
        console.print(f"Next: {NEXT_STEP[rewrite.phase].format(t=rewrite.target)}")


class SettleReport:
    """Shows what a step waits for: in the progress bar, and as a line every ``every_s`` seconds
    (from the first), so that logs without a terminal are not silent either."""

    def __init__(self, console: Console, bar, task, every_s: float = 15.0):
        self.console, self.bar, self.task, self.every_s = console, bar, task, every_s
        self._next_line: dict[str, float] = {}

    def __call__(self, step, what: str, elapsed_s: float) -> None:
        self.bar.update(self.task, description=f"waiting for {what} ({elapsed_s:.0f} s)"[:80])
        due = self._next_line.setdefault(step.summary(), 0.0)
        if elapsed_s >= due:
            self.console.print(f"  waiting for {what} ({elapsed_s:.0f} s)", markup=False)
            self._next_line[step.summary()] = due + self.every_s
