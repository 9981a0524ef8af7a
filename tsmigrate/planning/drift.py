"""Drift: how the live instance differs from the schema the last apply left it with (changes made
outside tsmigrate: the console, a script, another tool). Pure: two physical catalogs in, one
short line per difference out.

Only what the service stores is compared (``schema.physical``): key derivations, attribute
columns and access patterns are declarations, not live state.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import attrs

from tsmigrate.schema import Catalog, Table, physical
from tsmigrate.schema.render import duration

MISSING = "missing"  # the last apply left the table; it is gone
EXTRA = "extra"  # a table the last apply did not leave
CHANGED = "changed"


@attrs.frozen
class TableDrift:
    table: str
    kind: str  # MISSING, EXTRA or CHANGED
    details: tuple[str, ...] = ()

    def text(self) -> str:
        if self.kind == MISSING:
            return f"{self.table}: dropped (the last apply left it)"
        if self.kind == EXTRA:
            return f"{self.table}: not left by the last apply (created outside it)"
        return f"{self.table}: {'; '.join(self.details)}"

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "kind": self.kind, "details": list(self.details)}


def _names(items: Sequence[Any]) -> dict[str, Any]:
    return {item.name: item for item in items}


def _collection(what: str, expected: Sequence[Any], live: Sequence[Any]) -> list[str]:
    """Added, removed and changed members of a named collection (indexes, defined columns)."""
    was, now = _names(expected), _names(live)
    lines = [f"{what} {name} dropped" for name in sorted(was.keys() - now.keys())]
    lines += [f"{what} {name} added" for name in sorted(now.keys() - was.keys())]
    lines += [f"{what} {name} changed" for name in sorted(was.keys() & now.keys())
              if was[name] != now[name]]
    return lines


_OPTIONS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("time_to_live", "TTL", duration),
    ("max_versions", "max versions", str),
    ("max_time_deviation", "max time deviation", duration),
    ("allow_update", "allow update", str),
)


def _table_details(expected: Table, live: Table) -> list[str]:
    details = []
    if expected.primary_key != live.primary_key:
        def key(table: Table) -> str:
            return ", ".join(f"{c.name} {c.type}" for c in table.primary_key)

        details.append(f"primary key ({key(expected)}) -> ({key(live)})")
    for field, label, show in _OPTIONS:
        was, now = getattr(expected.options, field), getattr(live.options, field)
        if was != now:
            details.append(f"{label} {show(was)} -> {show(now)}")
    if expected.throughput != live.throughput:
        details.append(f"reserved throughput {expected.throughput.read}/{expected.throughput.write} "
                       f"-> {live.throughput.read}/{live.throughput.write} CU")
    if expected.stream != live.stream:
        def stream(table: Table) -> str:
            return f"on ({table.stream.expiration_hours}h)" if table.stream.enabled else "off"

        details.append(f"stream {stream(expected)} -> {stream(live)}")
    details += _collection("defined column", expected.defined_columns, live.defined_columns)
    details += _collection("secondary index", expected.secondary_indexes, live.secondary_indexes)
    details += _collection("search index", expected.search_indexes, live.search_indexes)
    return details


def drift(expected: Catalog, live: Catalog, gone_on_purpose: Collection[str] = ()) -> list[TableDrift]:
    """What differs between the catalog the last apply left (``expected``) and the live one, by
    table name. ``gone_on_purpose``: tables dropped by tsmigrate outside apply (a finished
    rewrite's old table, an aborted rewrite's target), not reported as dropped."""
    was, now = _names(physical(expected).tables), _names(physical(live).tables)
    found = [TableDrift(name, MISSING) for name in sorted(was.keys() - now.keys())
             if name not in gone_on_purpose]
    found += [TableDrift(name, EXTRA) for name in sorted(now.keys() - was.keys())]
    for name in sorted(was.keys() & now.keys()):
        details = _table_details(was[name], now[name])
        if details:
            found.append(TableDrift(name, CHANGED, tuple(details)))
    return sorted(found, key=lambda d: d.table)
