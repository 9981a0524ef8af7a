"""`tsmigrate apply`: change the target to match the models.

Text output shows the plan with its lint findings, asks ``[y/N]`` (unless ``--yes``), and only
then draws the progress bar. ``--format json`` prints one JSON result on stdout, whatever the
outcome (applied, no changes, refused, failed, interrupted), for deploy pipelines.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import click
from rich.console import Console

from tsmigrate.commands.common import (
    err_console,
    imports_uncollected,
    lint_config,
    load_catalog,
    models_option,
    project_option,
    reports_errors,
    with_target,
)
from tsmigrate.errors import TsmigrateError
from tsmigrate.schema.render import duration

if TYPE_CHECKING:
    from tsmigrate.instance.apply import ApplyOptions


class InterruptedOutsideSteps(TsmigrateError):
    """Ctrl-C while apply was not running one of the plan's steps."""

    exit_code = 130  # as ApplyInterrupted, and as a shell reports SIGINT

    def __init__(self) -> None:
        super().__init__(
            "apply interrupted (Ctrl-C) outside the plan's steps (planning, waiting for the lock, "
            "or continuing an earlier run's rewrite or reindex); what was done stays done: run "
            "`tsmigrate apply` again to resume, it plans from the live state and continues from there"
        )


class _Bar:
    """A progress bar created at the first step, so it never draws under the prompt. No bar in
    a pipe: it is transient, so it would show nothing there, yet rich would still render it ten
    times a second for the whole apply, a rewrite's backfill included."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.task: Any = None

    def __call__(self, number: int, total: int, step: Any) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        if not err_console.is_terminal:
            return
        if self.bar is None:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=err_console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task("applying", total=total)
        self.bar.update(self.task, completed=number - 1, description=step.summary()[:60])

    def update(self, _task: Any, **fields: Any) -> None:
        """What SettleReport calls: shown once the bar is drawn."""
        if self.bar is not None:
            self.bar.update(self.task, **fields)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _result(outcome: str, plan: Any, findings: Any, done: int, error: str = "",
            failed_step: int | None = None, note: str = "", target: str = "") -> dict[str, Any]:
    steps = []
    for number, step in enumerate(plan.steps if plan is not None else (), 1):
        status = "done" if number <= done else "not run"
        if number == failed_step:
            status = "interrupted" if outcome == "interrupted" else "failed"
        steps.append({"number": number, "kind": step.kind, "summary": step.summary(),
                      "risk": step.risk, "status": status})
    return {
        "outcome": outcome,
        "target": target,
        "executed": done,
        "steps": steps,
        "lint": [f.to_dict() for f in findings],
        "errors": [error] if error else [],
        "note": note,
    }


def apply_options(flags: Mapping[str, Any], *, rewrite_report: Any = None,
                  reindex_report: Any = None) -> ApplyOptions:
    """The ``ApplyOptions`` apply's flags ask for (``rewrite_report`` and ``reindex_report``
    show progress); the command adds the lint settings and the rewrite workers' connection."""
    from tsmigrate.instance.apply import ApplyOptions
    from tsmigrate.reindex.flow import ReindexSettings, parse_weights
    from tsmigrate.rewrite import driver
    from tsmigrate.rewrite.planned import RewriteSettings

    weights = flags["reindex_weights"]
    reindex = ReindexSettings(weights=parse_weights(weights) if weights else (),
                              hold_s=flags["reindex_hold"])
    return ApplyOptions(
        allow_destructive=flags["allow_destructive"], prune=flags["prune"],
        lock_timeout_s=flags["lock_timeout"],
        rewrite=RewriteSettings(
            options=driver.RunOptions(flags["workers"], flags["dask"], flags["max_rows_per_s"]),
            report=rewrite_report or driver.quiet),
        reindex=attrs.evolve(reindex, report=reindex_report) if reindex_report else reindex,
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
              help="Parallel split tasks of a rewrite's backfill, and stream shards its change "
              "capture applies at once (switch, revert and finish capture with as many).")
@click.option("--dask", metavar="ADDRESS",
              help="Run a rewrite's split tasks and capture's shards on this Dask scheduler "
              "(tcp://host:8786).")
@click.option("--max-rows-per-s", type=click.FloatRange(min=1), default=None,
              help="Throttle a rewrite's backfill writes.")
@click.option("--lock-timeout", "lock_timeout", type=click.FloatRange(min=0), default=0,
              metavar="SECONDS", help="Wait up to this long for a lock another apply holds "
              "(default: fail at once).")
@click.option("--reindex-weights", "reindex_weights", metavar="W1,W2,...",
              help="Before a reindexed search index is switched, send it these percentages of "
              "the searches in turn (e.g. 10,50,100), each held --reindex-hold seconds.")
@click.option("--reindex-hold", "reindex_hold", type=click.FloatRange(min=0), default=60,
              show_default=True, metavar="SECONDS", help="How long each --reindex-weights "
              "weight is held.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: one machine-readable result on stdout.")
@reports_errors
def apply_command(models, project, choice, plan_file, yes, fmt, **flags):
    """Change the target to match the models (takes a lock, records history).

    Refused (exit 3, nothing changed) when lint finds an error, except on destructive steps
    that --allow-destructive acknowledges. A failed or interrupted run names the step and
    what was done before it; running apply again continues from the live state.
    """
    with imports_uncollected():
        from tsmigrate.instance import adapter
        from tsmigrate.instance.apply import ApplyFailed, ApplyHooks, ApplyRefused, apply
        from tsmigrate.instance.target import connect
        from tsmigrate.planning.planfile import read_plan_file
        from tsmigrate.planning.planrender import findings_text, plan_text
        from tsmigrate.reindex.progress import ReindexProgress
        from tsmigrate.rewrite import driver
        from tsmigrate.rewrite.progress import ApplyProgress, next_step

    as_json = fmt == "json"
    # Human output goes to stderr under --format json, so stdout holds only the JSON result.
    console = err_console if as_json else Console(highlight=False, soft_wrap=True)
    seen: dict[str, Any] = {"plan": None, "findings": (), "target": ""}

    def show(plan, findings) -> None:
        seen.update(plan=plan, findings=tuple(findings))
        if as_json:
            return
        if plan.has_changes:
            console.print(plan_text(plan, findings=findings), end="")
        else:
            console.print(findings_text(findings), end="")

    def confirm(plan) -> bool:
        if yes:
            return True
        if not sys.stdin.isatty():
            raise ApplyRefused("confirmation needed: run interactively, or pass --yes")
        return click.confirm(f"Apply these {len(plan.steps)} steps?", default=False, err=as_json)

    def on_lock_wait(holder) -> None:
        err_console.print(f"waiting up to {duration(round(flags['lock_timeout']))} for the apply lock "
                          f"held by {holder.describe()}", markup=False)

    bar = _Bar()
    waits = SettleReport(err_console, bar, None)
    rewrite_progress = ApplyProgress(err_console)
    reindex_progress = ReindexProgress(err_console)
    try:
        from tsmigrate.schema.config import load_project

        if load_project(project).versioned:
            raise ApplyRefused(
                "this project uses the versioned workflow ([tool.tsmigrate] workflow = "
                "\"versioned\"): apply does not change the instance from the models; run "
                "`tsmigrate upgrade head` (`tsmigrate revision --autogenerate` turns model changes "
                "into a revision)"
            )
        options = apply_options(flags, rewrite_report=rewrite_progress, reindex_report=reindex_progress)
        proj, catalog = load_catalog(project, models)
        target = choice.resolve(proj)
        seen["target"] = target.identity
        console.print(f"[dim]target: {target.describe()}[/]")
        document = read_plan_file(plan_file, target.identity, catalog) if plan_file else None
        with adapter.service_errors(target.describe()), connect(proj, target) as client:
            options = attrs.evolve(
                options, lint=lint_config(proj),
                rewrite=attrs.evolve(options.rewrite,
                                     spec=driver.spec_of(client, local_defaults=target.embedded)))
            hooks = ApplyHooks(confirm=confirm, show=show, progress=bar, waiting=waits,
                               on_lock_wait=on_lock_wait)
            outcome = apply(client, catalog, options, hooks, target_identity=target.identity,
                            document=document)
    except ApplyFailed as exc:
        if as_json:
            kind = "interrupted" if exc.interrupted else "failed"
            click.echo(json.dumps(_result(kind, exc.plan, seen["findings"], exc.number - 1, str(exc),
                                          exc.number, target=seen["target"]), indent=2))
        raise
    except TsmigrateError as exc:
        if as_json:
            click.echo(json.dumps(_result("refused", seen["plan"], seen["findings"], 0, str(exc),
                                          target=seen["target"]), indent=2))
        raise
    except KeyboardInterrupt:
        # Outside the plan's steps (a step's own interrupt is ApplyInterrupted): while planning,
        # waiting for the lock, or continuing an earlier run's rewrite or reindex.
        stopped = InterruptedOutsideSteps()
        if as_json:
            click.echo(json.dumps(_result("interrupted", seen["plan"], seen["findings"], 0,
                                          str(stopped), target=seen["target"]), indent=2))
        raise stopped from None
    finally:
        bar.stop()
        rewrite_progress.close()
        reindex_progress.close()
    if as_json:
        kind = ("applied" if outcome.executed or outcome.rewrites or outcome.reindexes
                else "no changes")
        result = _result(kind, outcome.plan, outcome.findings, outcome.executed,
                         note=outcome.note, target=seen["target"])
        result["rewrites"] = [{"source": r.source, "target": r.target, "phase": r.phase}
                              for r in outcome.rewrites]
        result["reindexes"] = [{"table": r.table, "index": r.index, "stage": r.stage}
                               for r in outcome.reindexes]
        click.echo(json.dumps(result, indent=2))
        return
    if outcome.note:
        console.print(f"[dim]{outcome.note}[/]")
    if outcome.executed:
        console.print(f"[bold green]Applied {outcome.executed} step(s).[/]")
    elif outcome.reindexes:
        console.print(f"[bold green]Finished {len(outcome.reindexes)} reindex(es)[/] an earlier "
                      "apply left.")
    elif not outcome.rewrites:
        console.print("[bold green]No changes.[/] The instance matches the models.")
    for rewrite in outcome.rewrites:
        console.print(f"[bold]rewrite {rewrite.source} -> {rewrite.target}: {rewrite.phase}[/] "
                      "(copied, capturing changes, verified).")
        console.print(f"Next: {next_step(rewrite)}")


class SettleReport:
    """Shows what a step waits for: in the progress bar, and as a line every ``every_s`` seconds
    (from the first), so that logs without a terminal are not silent either."""

    def __init__(self, console: Console, bar, task, every_s: float = 15.0):
        self.console, self.bar, self.task, self.every_s = console, bar, task, every_s
        self._next_line: dict[str, float] = {}

    def __call__(self, step, what: str, elapsed_s: float) -> None:
        self.bar.update(self.task, description=f"waiting for {what} ({duration(round(elapsed_s))})"[:80])
        due = self._next_line.setdefault(step.summary(), 0.0)
        if elapsed_s >= due:
            self.console.print(f"  waiting for {what} ({duration(round(elapsed_s))})", markup=False)
            self._next_line[step.summary()] = due + self.every_s
