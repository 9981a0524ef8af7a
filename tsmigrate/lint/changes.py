"""Changes a plan makes that lose data or bring old data back; each finding names its step.

Severities follow Atlas: dropping a table is an error (nothing brings it back); the other losses
are warnings, since ``tsmigrate apply`` already refuses destructive steps without
``--allow-destructive`` and the reviewer decides.
"""

from __future__ import annotations

from collections.abc import Iterator

from tsmigrate.lint.core import ERROR, WARNING, Context, Finding, rule
from tsmigrate.planning import ops
from tsmigrate.schema import NO_TTL, Table
from tsmigrate.schema.render import duration


def _steps(context: Context) -> Iterator[tuple[int, ops.Step]]:
    if context.plan is not None:
        yield from enumerate(context.plan.steps, 1)


def _lowers_ttl(before: int, after: int) -> bool:
    return after != NO_TTL and (before == NO_TTL or after < before)


@rule("TS-DS101", ERROR, "drop table")
def drop_table(context: Context) -> Iterator[Finding]:
    for number, step in _steps(context):
        if isinstance(step, ops.DropTable):
            yield context.finding(
                step.table,
                "table",
                f"table {step.table} is deleted with every row and secondary index; it cannot be "
                "undone",
                "export it first (to OSS) if the data may be needed, and drop it only once no "
                "service reads it",
                step=number,
            )


@rule("TS-DS102", WARNING, "drop secondary index")
def drop_secondary_index(context: Context) -> Iterator[Finding]:
    for number, step in _steps(context):
        if isinstance(step, ops.DropIndex) and not step.replaced:
            yield context.finding(
                step.table,
                f"index {step.index.name}",
                f"index {step.index.name} is dropped: queries that read it fail, and recreating "
                "it means indexing the whole table again",
                "make sure no service queries the index any more, then drop it",
                step=number,
            )


@rule("TS-DS103", WARNING, "drop search index")
def drop_search_index(context: Context) -> Iterator[Finding]:
    dropped_tables = {s.table for _, s in _steps(context) if isinstance(s, ops.DropTable)}
    for number, step in _steps(context):
        # A dropped table takes its search indexes with it: TS-DS101 says so already.
        if isinstance(step, ops.DropSearchIndex) and not step.replaced and step.table not in dropped_tables:
            yield context.finding(
                step.table,
                f"search index {step.index.name}",
                f"search index {step.index.name} is dropped: searches on it fail, and recreating "
                "it means syncing the whole table again",
                "make sure no service searches the index any more, then drop it",
                step=number,
            )


def _users(table: Table, column: str) -> list[str]:
    """What in ``table`` reads ``column``: access patterns, secondary and search indexes."""
    users = []
    for pattern in table.access_patterns:
        order = pattern.order_by.lstrip("-+") if pattern.order_by else None
        if column in (*pattern.eq, pattern.range, order):
            users.append(f"access pattern {pattern.name}")
    for index in table.secondary_indexes:
        if column in (*index.keys, *index.include):
            users.append(f"index {index.name}")
    for search in table.search_indexes:
        if column in (*(f.name for f in search.fields), *search.routing_fields):
            users.append(f"search index {search.name}")
    return users


@rule("TS-DS104", WARNING, "remove a column still in use")
def remove_used_column(context: Context) -> Iterator[Finding]:
    for number, step in _steps(context):
        if not isinstance(step, ops.DeleteDefinedColumns):
            continue
        table = context.target.table(step.table)
        if table is None:
            continue
        for column in step.columns:
            users = _users(table, column.name)
            if not users:
                continue
            now = table.column_type(column.name)
            if column.name in {c.name for c in table.defined_columns}:
                change = f"defined again as {now}"
            elif now is not None:
                change = "kept only as an undeclared attribute"
            else:
                change = "no longer declared"
            yield context.finding(
                table,
                column.name,
                f"defined column {column.name} ({column.type}) is deleted ({change}), but "
                f"{', '.join(users)} still use{'s' if len(users) == 1 else ''} it",
                "keep the column (and its type) while anything reads it, or change the readers "
                "first in an earlier plan",
                step=number,
            )


@rule("TS-DS105", WARNING, "lower TTL")
def lower_ttl(context: Context) -> Iterator[Finding]:
    for number, step in _steps(context):
        if isinstance(step, ops.UpdateOptions):
            before, after = step.before.time_to_live, step.after.time_to_live
            where, what = "ttl", f"table {step.table}"
        elif isinstance(step, ops.UpdateSearchIndexTTL):
            before, after = step.before, step.after
            where, what = f"search index {step.index}", f"search index {step.index}"
        else:
            continue
        if _lowers_ttl(before, after):
            yield context.finding(
                step.table,
                where,
                f"TTL of {what} goes from {duration(before)} to {duration(after)}: data written "
                f"more than {duration(after)} ago expires at once and is purged",
                "export older data first if it is still needed, or lower the TTL in stages",
                step=number,
            )


@rule("TS-DS106", WARNING, "lower max versions")
def lower_max_versions(context: Context) -> Iterator[Finding]:
    for number, step in _steps(context):
        if isinstance(step, ops.UpdateOptions) and step.after.max_versions < step.before.max_versions:
            before, after = step.before.max_versions, step.after.max_versions
            yield context.finding(
                step.table,
                "max_versions",
                f"max versions goes from {before} to {after}: all but the newest {after} "
                "version(s) of every cell are deleted (asynchronously, but for good)",
                "read and keep the older versions elsewhere first if they are still needed",
                step=number,
            )


@rule("TS-VT201", WARNING, "raise max versions")
def raise_max_versions(context: Context) -> Iterator[Finding]:
    for number, step in _steps(context):
        if isinstance(step, ops.UpdateOptions) and step.after.max_versions > step.before.max_versions:
            before, after = step.before.max_versions, step.after.max_versions
            yield context.finding(
                step.table,
                "max_versions",
                f"max versions goes from {before} to {after}: versions beyond the old limit that "
                "are not yet purged become readable again, so reads may return stale values",
                "read with max_versions=1 (or a time range) where only the latest value is wanted",
                step=number,
            )
