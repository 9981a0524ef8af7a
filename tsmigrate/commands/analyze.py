"""`tsmigrate analyze TABLE`: where a table's load lands, from a sample of its rows (read calls
only; the metrics are ``tsmigrate.lint.spread``'s, the sample ``tsmigrate.rewrite.keysample``'s)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click
from rich.markup import escape

from tsmigrate.commands.common import connected, err_console, project_option, reports_errors, with_target


@click.command(name="analyze")
@click.argument("table")
@project_option
@with_target
@click.option("--sample", "limit", type=int, default=None, metavar="ROWS",
              help="Read the whole table up to this many rows, beyond that as many spread evenly "
                   "over its key ranges (default: 100,000; at least 1,000).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@reports_errors
def analyze_command(table, project, choice, limit, fmt):
    """Find hot partitions in a table's data: how its partition key spreads rows and new writes.

    Samples the table (read calls only) and reports, for the partition key (the first key
    column), the distinct values seen, the share of rows under the most common value, and how
    much of the key range the newest 10% of the rows (by write time) span, with findings that
    name the value or range and the fix. docs/commands.md says how each is measured.
    """
    from tsmigrate.lint.spread import MIN_ROWS
    from tsmigrate.rewrite import keysample

    limit = keysample.DEFAULT_ROWS if limit is None else limit
    if limit < MIN_ROWS:
        raise click.BadParameter(f"{limit:,} rows are too few to judge a key's spread: give at "
                                 f"least {MIN_ROWS:,}", param_hint="--sample")
    with connected(project, choice) as (client, target):
        live = _live_table(client, table, target.describe())
        with _progress(table) as progress:
            sampled = keysample.sample(client, live, limit, progress=progress)
    spread = keysample.source_spread(sampled)
    if fmt == "json":
        click.echo(json.dumps(spread.to_dict(), indent=2, ensure_ascii=False))
    else:
        click.echo(spread_text(spread, target.describe(), sampled.seconds), nl=False)


def _live_table(client, name: str, where: str):
    """The table ``name`` as IR (its key columns), or an error naming what exists instead."""
    from tsmigrate.errors import TsmigrateError
    from tsmigrate.instance.adapter import ir_table
    from tsmigrate.instance.rawclient import RawClient

    names = sorted(client.list_table())
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        hint = (f"did you mean {close[0]!r}?" if close else
                f"its tables: {', '.join(names)}" if 0 < len(names) <= 20 else
                "it has no tables" if not names else "tsmigrate inspect lists its tables")
        raise TsmigrateError(f"table {name!r} does not exist on {where} ({hint})")
    return ir_table(RawClient(client).describe_table(name), [])


@contextmanager
def _progress(table: str) -> Iterator[Callable[[int, int], None]]:
    """Progress of a sample on stderr: a bar on a terminal (gone once done), plain lines every
    TSMIGRATE_PROGRESS_EVERY_S seconds on a pipe (none for a sample that takes less)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from tsmigrate.instance.pipeprogress import PipeProgress

    if not err_console.is_terminal:
        pipe = PipeProgress(err_console, f"analyze {table}")
        try:
            yield lambda done, limit: pipe.count("sampling", done, limit)
        finally:
            pipe.stop()
        return
    bar = Progress(TextColumn(f"sampling {escape(table)}"), BarColumn(),
                   TextColumn("{task.completed:,.0f} of up to {task.total:,.0f} rows"),
                   TimeElapsedColumn(), console=err_console, transient=True)
    task = bar.add_task("sample", total=None)
    with bar:
        yield lambda done, limit: bar.update(task, completed=done, total=limit)


def spread_text(spread, where: str, seconds: float) -> str:
    """The report as text: one line when the table is empty or too small to judge."""
    from tsmigrate.lint.spread import MIN_ROWS, RANGES, percent
    from tsmigrate.rewrite.cost import amount

    name = spread.table
    if not spread.rows_sampled:
        return f"table {name} on {where} is empty: no rows, nothing to judge\n"
    if not spread.judged:
        return (f"table {name} on {where} holds {spread.rows_sampled:,} rows: too few to judge "
                f"its key spread (analyze needs at least {MIN_ROWS:,})\n")
    sample = spread.sample
    column = spread.partition_key
    lines = [
        f"table {name} on {where}: partition key {column}",
        f"sample:               {spread.rows_sampled:,} rows, {sample['method']} "
        f"({sample['requests']:,} reads, {amount(sample['bytes_read'])}, about "
        f"{sample['read_cu']:,} read CUs, {seconds:.1f} s)",
        f"partition key values: {spread.partition_key_values:,} distinct",
        f"top value share:      {percent(spread.top_value_share, fine=True)} "
        f"({column} = {_value(spread.top_value)})",
    ]
    found = spread.recent
    if spread.recent_span is not None and found is not None:
        lines.append(f"recent span:          {percent(spread.recent_span)} (the newest {found.newest:,} "
                     f"rows by write time fall in {found.hit} of {RANGES} key ranges)")
    else:
        lines.append(f"recent span:          unknown ({spread.note})")
    findings = spread.findings
    if not findings:
        lines.append("findings:             none")
    else:
        lines.append(f"findings:             {len(findings)}")
        for finding in findings:
            lines.append(f"  ! {finding.code} {finding.message}")
            lines.append(f"      fix: {finding.fix}")
    return "\n".join(lines) + "\n"


def _value(value) -> str:
    return value.hex() if isinstance(value, (bytes, bytearray)) else repr(value)
