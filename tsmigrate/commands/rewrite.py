"""`tsmigrate rewrite status|conflicts|follow|switch|revert|pause|resume|finish|abort`: watch and steer
rewrites that `tsmigrate apply` started (their state lives in the instance's tsmigrate_state)."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console

from tsmigrate.commands.common import (
    connected,
    err_console,
    models_option,
    project_option,
    reports_errors,
    with_target,
)
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


def _recorded(client: Any, command: str, kind: str, target: str, risk: str = "safe") -> Any:
    """The command's run in the history, and the step of its main action (``records``)."""
    from tsmigrate.instance.records import Action, CommandRun

    run = CommandRun(client, f"rewrite {command}")
    return run, run.step(Action(kind, f"{command} {target}", target, risk))


@click.group(cls=Group)
def rewrite() -> None:
    """Watch and steer key-changing rewrites (started by apply)."""


@rewrite.command()
@click.argument("table", required=False)
@project_option
@with_target
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@reports_errors
def status(table, project, choice, fmt):
    """Phase, rows copied / estimated, rows/s, ETA, each capture's state and lag, a fence that
    is up, collisions, verification."""
    from tsmigrate.rewrite import machine
    from tsmigrate.rewrite.progress import status_data, status_text

    with connected(project, choice) as (client, _target):
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
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@reports_errors
def conflicts(table, project, choice, fmt):
    """Late writes that conflict with the table of record: key, column, both values, which stands."""
    from tsmigrate.rewrite import late

    with connected(project, choice) as (client, _target):
        rewrite = _rewrite_of(client, table)
        found = late.conflicts(client, rewrite.target)
    if fmt == "json":
        click.echo(json.dumps({"rewrite": rewrite.target, "conflicts": found}, indent=2, sort_keys=True))
        return
    if not found:
        console.print(f"{rewrite.target}: no conflicts.")
        return
    waiting = sum(not c.get("accepted") for c in found)
    console.print(f"{rewrite.target}: {len(found)} conflict(s), {waiting} not accepted "
                  "(finish --accept-conflicts accepts them; the table of record's value stands):",
                  markup=False)
    for conflict in found:
        console.print(f"  {late.describe(conflict)}", markup=False)


@rewrite.command()
@click.argument("table")
@project_option
@with_target
@click.option("--for", "seconds", type=click.FloatRange(min=0), default=None,
              help="Stop after this many seconds (default: until interrupted).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Stream shards applied at once, on threads (default: the rewrite's last "
              "--workers, else 4).")
@click.option("--dask", metavar="ADDRESS",
              help="Apply the stream shards as tasks on this Dask scheduler (tcp://host:8786).")
@reports_errors
def follow(table, project, choice, seconds, workers, dask):
    """Keep change capture running (lag shown) while services move to the new model."""
    import time

    from tsmigrate.rewrite import driver, machine, shards

    last = [0.0]

    def report(event: str, data: dict[str, Any]) -> None:
        if event == "capture" and time.monotonic() - last[0] > 2:
            last[0] = time.monotonic()
            into = "old table" if data.get("direction") == machine.SWITCHED else "new table"
            shards_read = data.get("shards") or {}
            err_console.print(f"capture into the {into}: lag {data['lag_s']:.1f}s, "
                              f"{data.get('records_per_s', 0):,.0f} records/s on {len(shards_read)} "
                              f"shard(s) x {data.get('workers', 1)} worker(s), "
                              f"applied {data['applied']:,}, moved {data['moved']:,}", markup=False)

    with connected(project, choice) as (client, target):
        rewrite = _rewrite_of(client, table)
        count = workers or int(rewrite.get("capture_workers") or shards.DEFAULT_WORKERS)
        shard_runner = shards.runner(count, dask=dask, spec=driver.spec_of(client, target.embedded))
        with machine.Runner(client, rewrite.target) as runner:
            try:
                if workers and rewrite.get("capture_workers") != workers:
                    runner.save(capture_workers=workers)  # switch and finish capture with as many
                driver.follow(client, runner, seconds, report, shard_runner=shard_runner)
            except KeyboardInterrupt:
                err_console.print("stopped; the capture position is saved")
            finally:
                shard_runner.close()
            current = runner.rewrite
    from tsmigrate.rewrite.progress import next_step

    reverse = current.side == machine.TARGET
    followed = current.target if reverse else current.source
    lag = current.get("reverse_lag_s" if reverse else "capture_lag_s") or 0
    console.print(f"{current.target}: {current.phase}, capture followed {followed} "
                  f"(lag {lag:.1f}s). Next: {next_step(current)}")


@rewrite.command()
@click.argument("table")
@project_option
@with_target
@reports_errors
def pause(table, project, choice):
    """Pause the rewrite; the process running it stops at its next checkpoint."""
    from tsmigrate.rewrite import machine

    with connected(project, choice) as (client, _target):
        rewrite = _rewrite_of(client, table)
        if rewrite.phase not in machine.RUNNING_PHASES:
            raise machine.RewriteError(f"the rewrite into {rewrite.target} is {rewrite.phase}; "
                                       "only a running rewrite can be paused")
        _run, step = _recorded(client, "pause", "rewrite_pause", rewrite.target)
        with step:
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
def resume(table, project, choice, workers, dask, max_rows_per_s):
    """Resume a paused or failed rewrite: continue it up to ready."""
    from tsmigrate.rewrite import driver, machine
    from tsmigrate.rewrite.progress import ApplyProgress, next_step

    with connected(project, choice) as (client, target):
        rewrite = _rewrite_of(client, table)
        if rewrite.phase not in (machine.PAUSED, machine.FAILED):
            raise machine.RewriteError(f"the rewrite into {rewrite.target} is {rewrite.phase}, not "
                                       "paused or failed")
        report = ApplyProgress(err_console)
        _run, step = _recorded(client, "resume", "rewrite_resume", rewrite.target, "data-copy")
        with step, machine.Runner(client, rewrite.target) as runner:
            try:
                if rewrite.resume_to in (machine.READY, *machine.CUT_OVER, machine.FINISHING):
                    done = runner.save(phase=rewrite.resume_to, error=None)
                else:
                    done = driver.run_to_ready(
                        client, driver.spec_of(client, target.embedded), runner,
                        driver.RunOptions(workers, dask, max_rows_per_s), report)
            finally:
                report.close()
    console.print(f"{done.target}: {done.phase}. Next: {next_step(done)}")


def _fence_report(event: str, data: dict[str, Any]) -> None:
    from tsmigrate.rewrite.progress import late_wait_line

    if event == "late-wait":
        err_console.print(late_wait_line(data), markup=False)
    elif event == "fence" and data["unacknowledged"]:
        names = ", ".join(f"{c.get('host')}:{c.get('pid')}" for c in data["unacknowledged"])
        err_console.print(f"not acknowledged within the lease (fenced anyway): {names}")
    elif event == "before-fence":
        err_console.print(f"before the fence: {_waited(data)}; raising the fence", markup=False)
    elif event == "wrong-side":
        err_console.print(f"switching with {len(data['rows'])} row(s) written to the target directly "
                          "(--accept-target-writes)")


@rewrite.command()
@click.argument("table")
@project_option
@with_target
@click.option("--lease", "lease_s", type=click.FloatRange(min=0.1), default=None,
              help="Seconds a service trusts the routing it read (default 2; kept for the rewrite).")
@click.option("--accept-target-writes", is_flag=True,
              help="Switch even though rows of the new table were written directly before it.")
@click.option("--no-revert", is_flag=True,
              help="Switch without reverse capture: the old table stays as it is at the switch and "
                   "revert is refused (required when the new model's rows cannot give the old key).")
@reports_errors
def switch(table, project, choice, lease_s, accept_target_writes, no_revert):
    """Make the new table the one services on the model API write: fence, drain, verify, switch."""
    from tsmigrate.rewrite import cutover, driver, machine
    from tsmigrate.rewrite.progress import next_step

    with connected(project, choice) as (client, target):
        rewrite = _rewrite_of(client, table)
        if rewrite.phase in (machine.SWITCHED, machine.FINISHING, machine.DONE):
            console.print(f"{rewrite.target}: already switched ({rewrite.phase}); services on the "
                          f"model API write {rewrite.target}. Next: {next_step(rewrite)}")
            return
        _run, step = _recorded(client, "switch", "rewrite_switch", rewrite.target)
        with step, machine.Runner(client, rewrite.target, handover=True) as runner:
            done = cutover.switch(client, driver.spec_of(client, target.embedded), runner,
                                  lease_s=lease_s, accept_target_writes=accept_target_writes,
                                  no_revert=no_revert, report=_fence_report)
    _print_fence(done, "switched", next_step(done))


@rewrite.command()
@click.argument("table")
@project_option
@with_target
@reports_errors
def revert(table, project, choice):
    """Make the old table the one services write again (until finish); nothing written is lost."""
    from tsmigrate.rewrite import cutover, machine
    from tsmigrate.rewrite.progress import next_step

    with connected(project, choice) as (client, _target):
        rewrite = _rewrite_of(client, table)
        if rewrite.phase == machine.READY or (rewrite.phase in (machine.PAUSED, machine.FAILED)
                                              and rewrite.resume_to == machine.READY):
            console.print(f"{rewrite.target}: nothing to revert ({rewrite.phase}); services on the "
                          f"model API already write {rewrite.source}"
                          + (" since the revert" if rewrite.get("reverted_ms") else "")
                          + f". Next: {next_step(rewrite)}")
            return
        _run, step = _recorded(client, "revert", "rewrite_revert", rewrite.target)
        with step, machine.Runner(client, rewrite.target, handover=True) as runner:
            done = cutover.revert(client, runner, report=_fence_report)
    _print_fence(done, "reverted", next_step(done))


def _waited(before: dict[str, Any]) -> str:
    """How long a cut-over command waited before its fence, in words."""
    parts = [f"capture reached the stream's end in {before.get('catch_up_s', 0):.1f}s"]
    if "late_net_s" in before:
        parts.append(f"the late-write net settled in {before['late_net_s']:.1f}s")
    if "verify_s" in before:
        parts.append(f"verification took {before['verify_s']:.1f}s")
    return ", ".join(parts)


def _print_fence(done: Any, what: str, next_text: str) -> None:
    fence = done.get("fence") or {}
    writes_to = done.target if done.side == "target" else done.source
    before = {k.removeprefix("before_"): v for k, v in fence.items() if k.startswith("before_")}
    waited = f"Before the fence: {_waited(before)}. " if before else ""
    held = ""
    if "clients_s" in fence:
        held = f" (clients {fence['clients_s']:.1f}s, drain {fence.get('drain_s', 0):.1f}s)"
    console.print(f"{done.target}: {what}; services on the model API write {writes_to}. {waited}"
                  f"Writes held {fence.get('held_ms', 0)} ms{held}, {fence.get('acknowledged', 0)} "
                  f"client(s) acknowledged. Next: {next_text}", markup=False)


@rewrite.command()
@click.argument("table")
@project_option
@with_target
@click.option("--allow-destructive", is_flag=True, help="Also drop the old table.")
@click.option("--force", is_flag=True,
              help="Finish from ready, without a switch (services not on the model API).")
@click.option("--accept-target-writes", is_flag=True,
              help="With --force: keep rows services wrote to the new table directly.")
@click.option("--accept-conflicts", is_flag=True,
              help="Finish although late writes conflict with the table of record, which keeps "
                   "its values (the conflicts are recorded in history; `rewrite conflicts` lists them).")
@models_option
@reports_errors
def finish(table, project, choice, allow_destructive, force, accept_target_writes,
           accept_conflicts, models):
    """After switch: stop capture, put the tables' settings back (and drop the old table with
    --allow-destructive, unless the models declare it)."""
    from tsmigrate.instance import records
    from tsmigrate.rewrite import driver, machine
    from tsmigrate.rewrite.progress import ApplyProgress

    declared = _declared_tables(project, models) if allow_destructive else frozenset()
    with connected(project, choice) as (client, target):
        rewrite = _rewrite_of(client, table)
        if rewrite.phase == machine.DONE and not (allow_destructive and not rewrite.get("source_dropped")):
            console.print(f"{rewrite.target}: already done"
                          + ("" if rewrite.get("source_dropped") else
                             f"; {rewrite.source} kept (finish --allow-destructive drops it)"))
            return
        report = ApplyProgress(err_console)  # in a pipe: a line every few seconds while it verifies
        run, step = _recorded(client, "finish", "rewrite_finish", rewrite.target)
        with records.drop_seen(run, client, rewrite.source, watch=allow_destructive), step, \
                machine.Runner(client, rewrite.target, handover=True) as runner:
            try:
                report("phase", {"phase": machine.FINISHING})
                done = driver.finish(client, driver.spec_of(client, target.embedded), runner,
                                     allow_destructive, force=force,
                                     accept_target_writes=accept_target_writes,
                                     accept_conflicts=accept_conflicts,
                                     declared=declared, report=report)
            finally:
                report.close()
        accepted = done.get("conflicts_accepted") or []
        if accepted:
            run.done(records.Action("accept_conflicts",
                                    f"accept {len(accepted)} conflict(s) of {done.target}: "
                                    + "; ".join(accepted), done.target, "destructive"))
    verification = done.get("verification") or {}
    changed = verification.get("changed_meanwhile", 0)
    console.print(f"{done.target}: done"
                  + (f". Verified against {done.source}" if done.get("finish_from") != "switched"
                     else f"; reverse capture stopped, {done.source} has every write up to now")
                  + (f" ({changed} row(s) changed by services on the new model)" if changed else "")
                  + (f"; {done.source} dropped." if allow_destructive else
                     f"; {done.source} kept (drop it with finish --allow-destructive or "
                     f"apply --prune). Writes to {done.source} from now on are carried by nothing: "
                     "services still writing it outside the model API lose them.")
                  + _late_summary(done))


def _late_summary(done: Any) -> str:
    stats = done.get("late_stats") or {}
    accepted = done.get("conflicts_accepted") or []
    if not stats.get("late_writes") and not accepted:
        return ""
    return (f" Late writes: {stats.get('late_writes', 0)} found, {stats.get('carried', 0)} "
            f"version(s) carried, {stats.get('conflicts', 0)} conflict(s)"
            + (f", {len(accepted)} accepted" if accepted else "") + ".")


def _declared_tables(project: Any, models: tuple[str, ...]) -> frozenset[str]:
    """The tables the project's models declare, which finish --allow-destructive never drops.
    Models that cannot be loaded refuse the drop: whether the old table is still declared is
    then unknown, and a dropped table cannot be brought back."""
    from tsmigrate.commands.common import load_catalog
    from tsmigrate.errors import SchemaError, TsmigrateError
    from tsmigrate.rewrite import machine

    try:
        # The replaces= rules are what this check is about: it names the table itself.
        _project, catalog = load_catalog(project, models,
                                         tolerate=frozenset({"replaces.declared", "replaces.cycle"}))
    except SchemaError as exc:
        raise machine.RewriteError(
            f"--allow-destructive needs the models, to be sure none declares the table it drops, "
            f"and they have {len(exc.problems)} schema problem(s) (tsmigrate validate lists them); "
            "fix them, or finish without --allow-destructive (the old table is kept)"
        ) from None
    except TsmigrateError as exc:
        raise machine.RewriteError(
            f"--allow-destructive needs the models, to be sure none declares the table it drops, "
            f"and they cannot be loaded ({exc}); run it in the project or name them with --models, "
            "or finish without --allow-destructive (the old table is kept)"
        ) from None
    return frozenset(t.name for t in catalog.tables)


@rewrite.command()
@click.argument("table")
@project_option
@with_target
@click.option("--discard-target-writes", is_flag=True,
              help="After a revert: abort although late writes to the new table conflict with "
                   "the old one (they are dropped with it; recorded in history).")
@reports_errors
def abort(table, project, choice, discard_target_writes):
    """Drop the target and put the source's stream back; the source's rows are untouched."""
    from tsmigrate.instance import records
    from tsmigrate.rewrite import driver, machine

    with connected(project, choice) as (client, _target):
        rewrite = _rewrite_of(client, table)
        if rewrite.phase == machine.ABORTED:
            console.print(f"{rewrite.target}: already aborted; {rewrite.source} left as it was.")
            return
        run, step = _recorded(client, "abort", "rewrite_abort", rewrite.target)
        with records.drop_seen(run, client, rewrite.target), step, \
                machine.Runner(client, rewrite.target) as runner:
            aborted = driver.abort(client, runner, discard_target_writes=discard_target_writes,
                                   report=_fence_report)
        discarded = aborted.get("conflicts_accepted") or []
        if discarded:
            run.done(records.Action("discard_target_writes",
                                    f"discard {len(discarded)} late write(s) to {aborted.target}: "
                                    + "; ".join(discarded), aborted.target, "destructive"))
    console.print(f"{aborted.target}: aborted; {aborted.target} dropped, {aborted.source} left as it was.")
