"""Tables as services use them: the write style a table accepts, and tables split by date."""

from __future__ import annotations

import re
from collections.abc import Iterator

from tsmigrate.lint.core import ERROR, WARNING, Context, Finding, rule
from tsmigrate.lint.names import is_time_like
from tsmigrate.schema import NO_TTL, Table


@rule("TS-AP502", ERROR, "UpdateRow on a table that rejects updates")
def updates_rejected(context: Context) -> Iterator[Finding]:
    for table in context.target.tables:
        if table.writes == "update" and not table.options.allow_update:
            indexed = table.secondary_indexes or table.search_indexes
            if indexed and table.options.time_to_live != NO_TTL:
                fix = (
                    "a table with a TTL and indexes must reject updates: have services write "
                    "whole rows with PutRow and declare writes='put'"
                )
            else:
                fix = "set allow_update=True, or have services write whole rows with PutRow (writes='put')"
            yield context.finding(
                table,
                "allow_update",
                "services write this table with UpdateRow (writes='update') but allow_update is "
                "False: every UpdateRow is rejected",
                fix,
            )


# A date at the end of a table name: _202609, _2026_09, _20260921, _2026_09_21.
_DATED = re.compile(r"^(?P<family>.+?)_(?P<date>\d{4}_?\d{2}(?:_?\d{2})?)$")


def _family(name: str) -> str | None:
    """The name without its date suffix, if it has a plausible one."""
    match = _DATED.match(name)
    if match is None:
        return None
    digits = match["date"].replace("_", "")
    year, month, day = int(digits[:4]), int(digits[4:6]), int(digits[6:] or 1)
    if 1970 <= year <= 2199 and 1 <= month <= 12 and 1 <= day <= 31:
        return match["family"]
    return None


def _time_range_patterns(table: Table) -> list[str]:
    return [
        p.name
        for p in table.access_patterns
        if (p.range and is_time_like(p.range))
        or (p.order_by and is_time_like(p.order_by.lstrip("-+")))
    ]


FAMILY_FIX = (
    "keep one table {family} with ttl= for the retention (the service expires old rows) and the "
    "time as a later key column; if whole-table archiving is the point, suppress with "
    "lint_ignore and the reason, and route and merge in the service"
)


@rule("TS-AP503", WARNING, "queries span a family of dated tables")
def dated_table_family(context: Context) -> Iterator[Finding]:
    families: dict[str, list[Table]] = {}
    for table in context.target.tables:
        family = _family(table.name)
        if family is not None:
            families.setdefault(family, []).append(table)
    for family, tables in sorted(families.items()):
        # Names sort in date order within one suffix style; the newest table carries the finding.
        newest = max(tables, key=lambda t: t.name.replace("_", ""))
        if len(tables) > 1:
            yield context.finding(
                newest,
                "table",
                f"{len(tables)} tables ({', '.join(t.name for t in tables)}) hold one family "
                f"{family}: a query over a time range reads each table it spans and merges the "
                "results in the service",
                FAMILY_FIX.format(family=family),
            )
            continue
        patterns = _time_range_patterns(newest)
        if patterns:
            yield context.finding(
                newest,
                f"access pattern {patterns[0]}",
                f"{newest.name} is one dated table of the family {family}, and "
                f"{', '.join(patterns)} range{'s' if len(patterns) == 1 else ''} over time: a "
                "range that crosses its period must read the next table too and merge",
                FAMILY_FIX.format(family=family),
            )
