"""Commands on the models alone (no instance needed): validate, show, lint."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from tsmigrate.commands.common import (
    lint_config,
    load_catalog,
    models_option,
    project_option,
    reports_errors,
)


@click.command()
@models_option
@project_option
@reports_errors
def validate(models: tuple[str, ...], project: Path | None) -> None:
    """Compile the models and check them against Tablestore's rules."""
    _project, catalog = load_catalog(project, models)
    indexes = sum(len(t.secondary_indexes) + len(t.search_indexes) for t in catalog.tables)
    click.echo(
        f"ok: {len(catalog.tables)} tables, {indexes} indexes, no problems "
        f"({catalog.fingerprint()[:19]})"
    )


@click.command()
@models_option
@project_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@reports_errors
def show(models: tuple[str, ...], project: Path | None, fmt: str) -> None:
    """Print the schema the models compile to."""
    from tsmigrate.schema.render import catalog_text

    _project, catalog = load_catalog(project, models)
    if fmt == "json":
        click.echo(catalog.to_json())
    else:
        click.echo(catalog_text(catalog), nl=False)
        for line in _family_lines(catalog):
            click.echo(line)


def _family_lines(catalog) -> list[str]:
    """A line per table family: the month tables plan creates now (the template is shown as
    its table above; no table has the template's own name), and what happens to old months."""
    from datetime import datetime, timezone

    from tsmigrate.schema.model import registered_models

    tables = {t.source: t for t in catalog.tables}
    families = {m._qualname(): m for m in registered_models()  # a class defined again replaces
                if m._qualname() in tables and m.table_family() is not None}
    lines = []
    for source, model in families.items():
        family, template = model.table_family(), tables[source]
        names = [family.table_name(template.name, m)
                 for m in family.planned_months(datetime.now(timezone.utc))]
        kept = (f"months past {family.retain} are archived to {family.archive} and dropped"
                if family.retain else "every month is kept")
        lines.append(f"\nfamily {template.name}: one table per UTC month of {family.field}, each as "
                     f"table {template.name} above; plan creates {', '.join(names)} (this month "
                     f"and {family.ahead} ahead); {kept}")
    return lines


@click.command()
@models_option
@project_option
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text",
              show_default=True)
@reports_errors
def lint(models, project, fmt):
    """Check the models against Tablestore design rules (no instance needed).

    Exit 1 when any finding is an error. Codes, rationale and examples: docs/lint.md.
    """
    from tsmigrate.lint import ERROR, run_lint
    from tsmigrate.lint.indexes import LIMITS, PREREQUISITES
    from tsmigrate.planning.planrender import findings_markdown, findings_text

    # Index prerequisites and limits, and concatenated keys that break order, come back as lint
    # findings (TS-IX401, TS-IX402, TS-PK306) instead of stopping the run.
    tolerate = PREREQUISITES | LIMITS | {"key-derivation.order"}
    proj, catalog = load_catalog(project, models, tolerate=tolerate)
    findings = run_lint(catalog, config=lint_config(proj))
    if fmt == "json":
        click.echo(json.dumps([f.to_dict() for f in findings], indent=2, sort_keys=True))
    elif fmt == "markdown":
        click.echo(findings_markdown(findings), nl=False)
    else:
        Console(highlight=False, soft_wrap=True).print(findings_text(findings), end="")
    if any(f.severity == ERROR for f in findings):
        sys.exit(1)
