"""`tsmigrate plan`: what apply would change on the target (read calls only), with lint."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from tsmigrate.commands.common import (
    EXIT_CHANGES,
    EXIT_LINT_ERROR,
    lint_config,
    load_catalog,
    models_option,
    plan_inputs,
    project_option,
    reports_errors,
    with_target,
)


def _with_rewrite_costs(project, target, live, catalog, result):
    """Estimate what each rewrite_table step copies (the ranges apply cuts, every version) and
    how long, at a rate measured on the instance; a rewrite that could outlive its source's
    stream records stops plan (StreamTooShort)."""
    from tsmigrate.instance import adapter
    from tsmigrate.instance.target import connect
    from tsmigrate.rewrite.cost import with_costs

    with adapter.service_errors(target.describe()), connect(project, target) as client:
        return with_costs(client, result, live=live, models=catalog)


def _with_rewrites_ahead(project, target, live, catalog, result):
    """The rewrites apply would start or continue besides the steps (the state table's rows)."""
    import attrs

    from tsmigrate.instance import adapter
    from tsmigrate.instance.target import connect
    from tsmigrate.rewrite.planned import upcoming

    with adapter.service_errors(target.describe()), connect(project, target) as client:
        return attrs.evolve(result, rewrites=upcoming(client, live, catalog))


def _with_key_spreads(project, target, live, catalog, result):
    """Each rewrite_table step's key spread: one sample of its source, measured for the source
    key and, through the rewrite's key transform, for the new key (read calls only)."""
    from tsmigrate.instance import adapter
    from tsmigrate.instance.target import connect
    from tsmigrate.rewrite.keysample import with_key_spreads

    with adapter.service_errors(target.describe()), connect(project, target) as client:
        return with_key_spreads(client, result, live, catalog)


def _with_capture_checks(project, target, result):
    """Whether change capture keeps up with each rewrite's source writes, for apply's default
    workers (the source's stream sampled briefly only when it is on)."""
    from tsmigrate.instance import adapter
    from tsmigrate.instance.target import connect
    from tsmigrate.rewrite import capacity, shards

    with adapter.service_errors(target.describe()), connect(project, target) as client:
        return capacity.with_checks(client, result, shards.DEFAULT_WORKERS)


@click.command()
@models_option
@project_option
@with_target
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text",
              show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the plan to this file (JSON, usable by apply --plan).")
@click.option("--prune", is_flag=True, help="Plan to drop tables that no model declares.")
@click.option("--detailed-exitcode", is_flag=True,
              help="Exit 2 when there are changes, 0 when there are none, 1 on error.")
@reports_errors
def plan(models, project, choice, fmt, out, prune, detailed_exitcode):
    """Show what apply would change on the target (read calls only).

    The plan is linted (model and plan rules, [tool.tsmigrate.lint] severities); the findings
    are part of every output. Exit 3, after printing everything, when a finding is an error
    that apply refuses (errors on destructive steps are acknowledged by --allow-destructive).
    """
    from tsmigrate.instance.apply import blocking_findings
    from tsmigrate.instance.state import STATE_TABLE
    from tsmigrate.lint import run_lint
    from tsmigrate.planning.plan import make_plan
    from tsmigrate.planning.planfile import plan_document
    from tsmigrate.planning.planrender import plan_json, plan_markdown, plan_text
    from tsmigrate.schema.config import load_project

    if load_project(project).versioned:
        from tsmigrate.commands.versioned import versioned_plan
        from tsmigrate.errors import ConfigError

        if out is not None or prune or models or fmt == "markdown":
            raise ConfigError(
                "in the versioned workflow plan shows pending revisions and drift (text or json); "
                "--out, --prune, --models and --format markdown belong to the declarative workflow"
            )
        versioned_plan(load_project(project), choice, fmt, detailed_exitcode)
        return
    proj, catalog = load_catalog(project, models)
    target, live, finished = plan_inputs(proj, choice)
    result = make_plan(live, catalog, prune=prune, bookkeeping=(STATE_TABLE,),
                       finished_rewrites=finished)
    result = _with_rewrites_ahead(proj, target, live, catalog, result)
    if any(step.kind == "rewrite_table" for step in result.steps):
        # Before --out is written: a rewrite refused here leaves no plan file behind.
        result = _with_rewrite_costs(proj, target, live, catalog, result)
        # Before lint: the TS-SP8xx rules read what the sample found.
        result = _with_key_spreads(proj, target, live, catalog, result)
    findings = run_lint(catalog, live=live, plan=result, config=lint_config(proj))
    if result.rewrites or any(step.kind == "rewrite_table" for step in result.steps):
        result = _with_capture_checks(proj, target, result)
    if out is not None:
        # The file carries a rewrite's cost as the JSON output does; apply's comparison of the
        # file's steps with its own leaves the cost out (an estimate, not part of the step).
        document = plan_document(result, target.identity, findings, prune=prune)
        out.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if fmt == "json":
        click.echo(plan_json(result, findings), nl=False)
    elif fmt == "markdown":
        title = f"tsmigrate plan: {target.describe()}"
        click.echo(plan_markdown(result, title=title, findings=findings), nl=False)
    else:
        console = Console(highlight=False, soft_wrap=True)
        console.print(f"[dim]target: {target.describe()}[/]")
        console.print(plan_text(result, findings=findings), end="")
    if blocking_findings(findings, result, allow_destructive=True):
        sys.exit(EXIT_LINT_ERROR)
    if detailed_exitcode and result.has_changes:
        sys.exit(EXIT_CHANGES)
