"""Before a switch: do the old and the new index answer the queries services rely on alike?

The queries are the table's access patterns that either index serves (``lint.access``), plus
"every row" (match all). Each pattern is run on both indexes for values taken from a sample of
the table's rows: equality on its ``eq`` fields, ``>=`` on its ``range`` field, sorted by its
``order_by``. Values are given to each index as its own field types expect (a LONG field takes
7, a KEYWORD field "7"), which is the declared change allowed for; a pattern using a field only
the new index has is run on the new one alone (it must answer). The answers must be the same:
the same total, the same first rows (in the pattern's order when both indexes sort by an
unchanged field, else as sets). Services keep writing meanwhile, so the old index is asked before
and after the new one: the new total must lie between the two old ones, every row both old
answers hold must be in the new one, and no row neither holds. Indexes follow writes with a
small lag on the service, so a difference is looked at again a few times before it counts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import tablestore as ts

from tsmigrate.errors import TsmigrateError
from tsmigrate.lint.access import routes
from tsmigrate.schema import AccessPattern, SearchField, SearchIndex, Table

SAMPLE_ROWS = 20  # rows read from the table to take query values from
VALUES_PER_PATTERN = 3  # sample rows each pattern is run with
LIMIT = 100  # rows compared per query (the Search API's page)
ATTEMPTS = 3
RETRY_S = 1.0


class ParityError(TsmigrateError):
    """The two indexes answer a query differently: the switch is blocked."""


@attrs.frozen
class Check:
    """One query run on both indexes."""

    pattern: str  # the access pattern's name, or "every row"
    query: str  # the query in words
    old_total: int | None  # None: not run on the old index (a new field)
    new_total: int
    only_old: tuple[str, ...] = ()  # a few keys only one index found
    only_new: tuple[str, ...] = ()
    order_differs: bool = False

    @property
    def same(self) -> bool:
        if self.old_total is None:
            return True
        return (self.old_total == self.new_total and not self.only_old and not self.only_new
                and not self.order_differs)

    @property
    def label(self) -> str:
        """The pattern and its query in words, once when they are the same ("every row")."""
        return self.pattern if self.query == self.pattern else f"{self.pattern}: {self.query}"

    def text(self) -> str:
        if self.old_total is None:
            return (f"{self.label}: {self.new_total} rows "
                    "(new index only: the old cannot run it)")
        if self.same:
            return f"{self.label}: {self.new_total} rows on both"
        parts = [f"{self.old_total} rows on the old index, {self.new_total} on the new"]
        if self.only_old:
            parts.append(f"only the old finds {', '.join(self.only_old)}")
        if self.only_new:
            parts.append(f"only the new finds {', '.join(self.only_new)}")
        if self.order_differs:
            parts.append("the rows come in another order")
        return f"{self.label}: {'; '.join(parts)}"


def _converted(field: SearchField, value: Any) -> Any:
    """The sample value as a query on ``field`` takes it (None: the field cannot hold it)."""
    if field.is_array and isinstance(value, str):
        try:
            items = json.loads(value)
        except ValueError:
            return None
        if not isinstance(items, list) or not items:
            return None
        value = items[0]
    kind = field.type.upper()
    try:
        if kind in ("LONG", "DATE"):
            return int(value) if not isinstance(value, float) or value.is_integer() else None
        if kind == "DOUBLE":
            return float(value)
        if kind == "BOOLEAN":
            return value if isinstance(value, bool) else str(value).lower() == "true"
        if kind in ("KEYWORD", "TEXT"):
            return str(value)
    except (TypeError, ValueError):
        return None
    return None


def _term(field: SearchField, value: Any) -> Any:
    if field.type.upper() == "TEXT":
        return ts.MatchPhraseQuery(field.name, value)
    return ts.TermQuery(field.name, value)


class _Unrunnable(Exception):
    """A query cannot be put to an index: ``missing`` names a field it lacks, else the sample
    value does not fit the field's type (the index holds no row by it)."""

    def __init__(self, reason: str, missing: bool):
        super().__init__(reason)
        self.missing = missing


@attrs.frozen
class _Query:
    words: str
    build: Callable[[SearchIndex], Any]  # the SDK query for an index; raises _Unrunnable
    sort_field: str | None = None


def _fields(index: SearchIndex) -> dict[str, SearchField]:
    return {f.name: f for f in index.fields}


def _value(fields: dict[str, SearchField], name: str, raw: Any) -> Any:
    if name not in fields:
        raise _Unrunnable(f"field {name} is not in the index", missing=True)
    value = _converted(fields[name], raw)
    if value is None:
        raise _Unrunnable(f"the value {raw!r} of {name} is not a {fields[name].type}: the index "
                          "cannot hold it", missing=False)
    return value


def _pattern_query(table: Table, pattern: AccessPattern, row: dict[str, Any]) -> _Query | None:
    needed = [*pattern.eq, *([pattern.range] if pattern.range else [])]
    if any(row.get(name) is None for name in needed):
        return None
    words = [f"{n} = {row[n]!r}" for n in pattern.eq]
    if pattern.range:
        words.append(f"{pattern.range} >= {row[pattern.range]!r}")
    order = pattern.order_by.lstrip("-+") if pattern.order_by else None
    if order:
        words.append(f"order by {pattern.order_by}")

    def build(index: SearchIndex) -> Any:
        fields = _fields(index)
        must = [_term(fields[n], _value(fields, n, row[n])) for n in pattern.eq]
        if pattern.range:
            value = _value(fields, pattern.range, row[pattern.range])
            must.append(ts.RangeQuery(pattern.range, range_from=value, include_lower=True))
        return ts.BoolQuery(must_queries=must) if must else ts.MatchAllQuery()

    sort_field = order if order and order not in table.primary_key_names else None
    return _Query(" and ".join(words) or "every row", build, sort_field)


def _keys(rows: Sequence[Any]) -> list[str]:
    return [", ".join(f"{n}={v!r}" for n, v in pk) for pk, _attrs in rows]


class _Runner:
    def __init__(self, client: Any, table: str):
        self.client, self.table = client, table

    def run(self, index_name: str, query: Any, sort_field: str | None, descending: bool
            ) -> tuple[int, list[str]]:
        sorters: list[Any] = []
        if sort_field:
            order = ts.SortOrder.DESC if descending else ts.SortOrder.ASC
            sorters.append(ts.FieldSort(sort_field, order))
        sorters.append(ts.PrimaryKeySort(ts.SortOrder.ASC))
        response = self.client.search(
            self.table, index_name,
            ts.SearchQuery(query, sort=ts.Sort(sorters), limit=LIMIT, get_total_count=True),
            ts.ColumnsToGet(return_type=ts.ColumnReturnType.NONE),
        )
        return response.total_count, _keys(response.rows)


def _sample(client: Any, table: Table) -> list[dict[str, Any]]:
    start = [(c.name, ts.INF_MIN) for c in table.primary_key]
    end = [(c.name, ts.INF_MAX) for c in table.primary_key]
    _consumed, _next, rows, _token = client.get_range(
        table.name, ts.Direction.FORWARD, start, end, max_version=1, limit=SAMPLE_ROWS)
    return [{**dict(row.primary_key), **{n: v for n, v, *_ in row.attribute_columns}}
            for row in rows]


def _patterns(table: Table, old: SearchIndex, new: SearchIndex) -> list[AccessPattern]:
    """The table's access patterns that the old or the new index serves."""
    served = []
    for pattern in table.access_patterns:
        for index in (old, new):
            view = attrs.evolve(table, search_indexes=[index], secondary_indexes=())
            if any(r.via == "search index" for r in routes(view, pattern)):
                served.append(pattern)
                break
    return served


def _queries(table: Table, old: SearchIndex, new: SearchIndex,
             sample: list[dict[str, Any]]) -> Iterator[tuple[str, _Query, bool]]:
    yield "every row", _Query("every row", lambda index: ts.MatchAllQuery()), False
    for pattern in _patterns(table, old, new):
        used = 0
        descending = bool(pattern.order_by and pattern.order_by.startswith("-"))
        for row in sample:
            query = _pattern_query(table, pattern, row)
            if query is None:
                continue
            yield pattern.name, query, descending
            used += 1
            if used == VALUES_PER_PATTERN:
                break


def _compare(runner: _Runner, name: str, query: _Query, descending: bool, old: SearchIndex,
             old_name: str, new: SearchIndex, new_name: str) -> Check:
    try:
        new_query = query.build(new)
    except _Unrunnable as exc:
        raise ParityError(f"search index {old_name}: the switch is blocked because {new_name} "
                          f"cannot answer {name}: {query.words} ({exc}). Fix the new schema (or "
                          "the rows) and apply again; the old index keeps serving meanwhile"
                          ) from None
    sort = query.sort_field
    same_sort = sort is not None and _fields(old).get(sort) == _fields(new).get(sort)
    try:
        old_query = query.build(old)
    except _Unrunnable:  # a field only the new index has, or a value the old one never held
        total, _ = runner.run(new_name, new_query, sort if sort in _fields(new) else None,
                              descending)
        return Check(name, query.words, None, total)
    sort_used = sort if same_sort else None
    # Services keep writing: the old index is asked before and after the new one, and only what
    # both old answers agree on must be in the new answer (and nothing neither has).
    first_total, first = runner.run(old_name, old_query, sort_used, descending)
    new_total, new_rows = runner.run(new_name, new_query, sort_used, descending)
    last_total, last = runner.run(old_name, old_query, sort_used, descending)
    stable = [k for k in last if k in set(first)]
    seen = set(first) | set(last)
    only_old = tuple(k for k in stable if k not in set(new_rows))[:3]
    only_new = tuple(k for k in new_rows if k not in seen)[:3]
    totals_agree = min(first_total, last_total) <= new_total <= max(first_total, last_total)
    old_total = new_total if totals_agree else last_total
    order_differs = (sort_used is not None and not only_old and not only_new
                     and [k for k in new_rows if k in set(stable)] != stable)
    return Check(name, query.words, old_total, new_total, only_old, only_new, order_differs)


def check(client: Any, table: Table, old: SearchIndex, old_name: str, new: SearchIndex,
          new_name: str, *, attempts: int = ATTEMPTS, retry_s: float = RETRY_S) -> list[Check]:
    """Run every query on both indexes; raise ParityError naming the first query whose answers
    still differ after ``attempts`` looks. ``table`` is the declared table (its access patterns)."""
    runner = _Runner(client, table.name)
    sample = _sample(client, table)
    checks = []
    for name, query, descending in _queries(table, old, new, sample):
        for attempt in range(attempts):
            result = _compare(runner, name, query, descending, old, old_name, new, new_name)
            if result.same:
                break
            if attempt + 1 < attempts:
                time.sleep(retry_s)
        if not result.same:
            raise ParityError(
                f"search index {old_name} of {table.name}: the switch is blocked because "
                f"{new_name} answers a query differently: {result.text()}. Fix the new schema (or "
                "the rows it cannot index) and apply again; the old index keeps serving meanwhile"
            )
        checks.append(result)
    return checks
