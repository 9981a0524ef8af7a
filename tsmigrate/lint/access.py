"""Access patterns: can the key order, a secondary index or a search index serve each query a
model declares, or would it be a full scan?

A table can only be read in key order: equality must fix a prefix of the key, a range may then
span the next key column, and an order can only follow that column (forwards or backwards).
Key derivations count: a hash-prefixed column is fixed by equality on its source (but never
ranged), a concatenation by equality on all its fields (or a range on its last one), a descending
column by its source, and a time bucket is fanned out over its buckets.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs

from tsmigrate.keys import Concat, Descending, TimeBucket
from tsmigrate.lint.core import ERROR, WARNING, Context, Finding, rule
from tsmigrate.planning import ops
from tsmigrate.schema import LOCAL, AccessPattern, PrimaryKeyColumn, Table
from tsmigrate.schema.render import pattern_text
from tsmigrate.schema.validate import INDEX_KEY_TYPES


@attrs.frozen
class Route:
    """How a pattern is served: by which structure, and the name of the structure if any."""

    via: str  # "primary key", "local index", "global index", "search index"
    name: str = ""

    def describe(self) -> str:
        return f"{self.via} {self.name}".strip()


def _order_column(pattern: AccessPattern) -> str | None:
    return pattern.order_by.lstrip("-+") if pattern.order_by else None


def _fixed_by(column: PrimaryKeyColumn, eq: set[str]) -> bool:
    if column.name in eq:
        return True
    derivation = column.derivation
    return derivation is not None and all(source in eq for source in derivation.sources)


def _ranges_over(column: PrimaryKeyColumn, target: str, eq: set[str]) -> bool:
    """Whether a range (or an order) on ``target`` is a range of this key column."""
    if column.name == target:
        return True
    derivation = column.derivation
    if isinstance(derivation, Descending):
        return derivation.source == target
    if isinstance(derivation, Concat):
        *head, last = derivation.fields
        return last == target and all(f in eq for f in head)
    return False


def key_serves(key: Sequence[PrimaryKeyColumn], pattern: AccessPattern) -> bool:
    eq = set(pattern.eq)
    position = 0
    used: set[str] = set()
    while position < len(key):
        column = key[position]
        if _fixed_by(column, eq):
            used |= {column.name, *(column.derivation.sources if column.derivation else ())}
        elif position == 0 and isinstance(column.derivation, TimeBucket):
            pass  # read every bucket in parallel and merge
        else:
            break
        position += 1
    after = key[position] if position < len(key) else None
    wanted = pattern.range or _order_column(pattern)
    concat = after is not None and isinstance(after.derivation, Concat)
    if concat and wanted and _ranges_over(after, wanted, eq):
        used |= set(after.derivation.fields[:-1])  # fixed as the prefix of the range
    if not eq <= used:
        return False  # an equality the key cannot fix would be a filter over a scan
    if pattern.range and _order_column(pattern) not in (None, pattern.range):
        return False
    if wanted is None:
        return True
    if wanted in used:
        return not pattern.range  # ordering by a fixed column is trivially satisfied
    return after is not None and _ranges_over(after, wanted, eq)


def _index_key(table: Table, keys: Sequence[str]) -> list[PrimaryKeyColumn]:
    by_name = {c.name: c for c in table.primary_key}
    full = [*keys, *(c.name for c in table.primary_key if c.name not in keys)]
    return [by_name.get(n, PrimaryKeyColumn(n, table.column_type(n) or "STRING")) for n in full]


def _search_serves(table: Table, fields: dict[str, object], pattern: AccessPattern) -> bool:
    needed = [*pattern.eq, *([pattern.range] if pattern.range else [])]
    if not all(getattr(fields.get(n), "index", False) for n in needed):
        return False
    order = _order_column(pattern)
    if order is None:
        return True
    if table.primary_key and order == table.primary_key[0].name:
        return True  # a primary-key sort
    return bool(getattr(fields.get(order), "sort_and_agg", False))


def routes(table: Table, pattern: AccessPattern) -> list[Route]:
    """Every structure of ``table`` that serves ``pattern``, cheapest first."""
    found = []
    if key_serves(table.primary_key, pattern):
        found.append(Route("primary key"))
    for index in table.secondary_indexes:
        if key_serves(_index_key(table, index.keys), pattern):
            found.append(Route("local index" if index.type == LOCAL else "global index", index.name))
    for search in table.search_indexes:
        if _search_serves(table, {f.name: f for f in search.fields}, pattern):
            found.append(Route("search index", search.name))
    return found


def _index_fix(table: Table, pattern: AccessPattern, wanted: list[str]) -> str:
    """An index that serves ``pattern``: a global index when its columns can key one."""
    pk_names = list(table.primary_key_names)
    keyable = [c for c in wanted if table.column_type(c) in INDEX_KEY_TYPES]
    if wanted and len(keyable) == len(wanted) and len(wanted) <= 4:
        defined = {d.name for d in table.defined_columns}
        undefined = [c for c in wanted if c not in pk_names and c not in defined]
        extra = (
            f" (declare {', '.join(repr(c) for c in undefined)} with defined=True)" if undefined else ""
        )
        return f"add GlobalIndex(keys={wanted!r}){extra}"
    fields = [*pattern.eq, *([pattern.range] if pattern.range else [])]
    order = _order_column(pattern)
    sort = f" with {order!r} sortable (sort=True)" if order else ""
    return f"add a SearchIndex over {fields or [order]!r}{sort}"


def _cheapest_fix(context: Context, table: Table, pattern: AccessPattern) -> str:
    """Reordering the key is cheapest, but only for a table not created yet (a key never
    changes in place); without a live instance (``tsmigrate lint``) that is not known."""
    wanted = [*pattern.eq, *([pattern.range or _order_column(pattern)] if (pattern.range or
                                                                           pattern.order_by) else [])]
    wanted = list(dict.fromkeys(c for c in wanted if c))
    index_fix = _index_fix(table, pattern, wanted)
    pk_names = list(table.primary_key_names)
    exists = None if context.live is None else context.live.table(table.name) is not None
    if not exists and wanted and set(wanted) <= set(pk_names):
        reordered = [*wanted, *(n for n in pk_names if n not in wanted)]
        by_name = {c.name: c for c in table.primary_key}
        candidate = attrs.evolve(table, primary_key=[by_name[n] for n in reordered])
        if all(routes(candidate, p) for p in table.access_patterns):
            order = f"declare its primary key in the order ({', '.join(reordered)}), which " \
                    "serves every declared pattern"
            if exists is None:
                return (f"if table {table.name} is not created yet, {order}; once it exists its "
                        f"key cannot change, so {index_fix}")
            return f"table {table.name} does not exist yet: {order}"
    return index_fix


@rule("TS-AP501", ERROR, "access pattern not servable")
def unservable_pattern(context: Context) -> Iterator[Finding]:
    for table in context.target.tables:
        for pattern in table.access_patterns:
            if not routes(table, pattern):
                yield context.finding(
                    table,
                    f"access pattern {pattern.name}",
                    f"{pattern_text(pattern)} cannot be served by the key order, a secondary "
                    "index or a search index: it would scan the whole table",
                    _cheapest_fix(context, table, pattern),
                )


def _breaking_step(plan, table: str, lost: Route) -> int | None:
    for number, step in enumerate(plan.steps, 1):
        if step.table != table:
            continue
        if isinstance(step, (ops.DropIndex, ops.DropSearchIndex, ops.ReindexSearchIndex)) \
                and step.index.name == lost.name:
            return number
        if isinstance(step, (ops.RewriteTable, ops.CreateTable)) and lost.via == "primary key":
            return number
    return None


@rule("TS-AP504", WARNING, "plan stops serving an access pattern")
def plan_breaks_pattern(context: Context) -> Iterator[Finding]:
    if context.plan is None or context.live is None:
        return
    for table in context.target.tables:
        before = context.live.table(table.name) or (
            context.live.table(table.replaces) if table.replaces else None
        )
        if before is None:
            continue
        for pattern in table.access_patterns:
            served_before = routes(before, pattern)
            if not served_before or routes(table, pattern):
                continue
            step = next(
                (n for r in served_before if (n := _breaking_step(context.plan, table.name, r))),
                None,
            )
            yield context.finding(
                table,
                f"access pattern {pattern.name}",
                f"{pattern_text(pattern)} is served today by "
                f"{' / '.join(r.describe() for r in served_before)}, but not after this plan",
                "keep the structure that serves it, or add another route before removing it",
                step=step,
            )
