"""Queries: key prefix + range (GetRange), secondary indexes, search indexes. Sans-IO (calls.py).

    rows.query(device_id="dev-1", ts=Range(gte=t0, lt=t1), reverse=True, limit=100,
               columns=["battery"], filter=Attr("battery") < 20)
    rows.query(index="by_serial", serial="S-1", fetch_missing=True)
    rows.search("alerts", battery=Range(lt=20), sort=["-ts"], limit=50)

- Equality on the natural fields fixes the key prefix; derived key columns are computed from
  them (a hash prefix from its source, a concatenation from its fields); a range applies to the
  next key column (on a ``Descending`` column the bounds and the direction are inverted, so the
  caller still reads in the natural order of the field).
- A time-bucket column the query does not fix is read bucket by bucket and the streams are
  merged in key order; a table family is read month table by month table the same way.
- Paging follows ``next_start_primary_key`` until it is None: a short or empty page (a filter
  that matched nothing in a 5000-row scan) never ends the query. Rows stream page by page.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from itertools import product, starmap
from typing import Any

import attrs
from tablestore import metadata as md

from tsmigrate.errors import KeyDerivationError
from tsmigrate.keys import Concat, Descending, TimeBucket
from tsmigrate.schema.model import Column, Model
from tsmigrate.service import batch
from tsmigrate.service.calls import Call, Emit, Op, Raw
from tsmigrate.service.codec import KeyColumn, ModelCodec
from tsmigrate.service.conditions import Attr, Condition, sdk_condition
from tsmigrate.service.errors import QueryError
from tsmigrate.service.keyrange import Segment, stream_segments
from tsmigrate.wire import rows as wire

PAGE_ROWS = 5000
SEARCH_PAGE = 100


@attrs.frozen
class Range:
    """Bounds on one field: ``Range(gte=a, lt=b)``; any side may be left open."""

    gte: Any = None
    gt: Any = None
    lte: Any = None
    lt: Any = None

    def __attrs_post_init__(self) -> None:
        if self.gte is not None and self.gt is not None:
            raise QueryError("give gte= or gt=, not both")
        if self.lte is not None and self.lt is not None:
            raise QueryError("give lte= or lt=, not both")

    @property
    def lower(self) -> tuple[Any, bool] | None:
        if self.gte is not None:
            return self.gte, True
        return (self.gt, False) if self.gt is not None else None

    @property
    def upper(self) -> tuple[Any, bool] | None:
        if self.lte is not None:
            return self.lte, True
        return (self.lt, False) if self.lt is not None else None


def between(low: Any, high: Any) -> Range:
    """Both ends included."""
    return Range(gte=low, lte=high)


# -- search query values -------------------------------------------------------------------------


@attrs.frozen
class Match:
    """Full-text match on a text field: ``title=Match("red shoes")``."""

    text: str


@attrs.frozen
class Prefix:
    prefix: str


@attrs.frozen
class Exists:
    """The field has a value."""


# -- range queries -------------------------------------------------------------------------------

_OPTIONS = ("reverse", "limit", "columns", "filter", "index", "fetch_missing", "page_size")


def check_names(codec: ModelCodec, names: Iterable[str], options: Iterable[str], call: str) -> None:
    """Every argument of a query is a field of the model or an option of the call: a misspelt
    option is named with the valid ones (and the closest), never taken for a field."""
    options = tuple(options)
    for name in names:
        if name in options or name in codec.fields:
            continue
        close = difflib.get_close_matches(name, [*options, *codec.fields], n=1)
        raise QueryError(
            f"{codec.name}.{call}(): {name!r} is neither a field nor an option"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; options: {', '.join(options)}; fields: {', '.join(sorted(codec.fields))}"
        )


@attrs.define
class Cursor:
    """One ordered stream of a query: its segments (GetRange calls) on one table, read in
    turn, and the page of rows being handed out."""

    table: str
    segments: list[Segment]
    start: list[tuple[str, Any]] = attrs.field(init=False)
    skip: list[tuple[str, Any]] | None = attrs.field(init=False)
    rows: list[Any] = attrs.field(factory=list)
    position: int = 0
    done: bool = False

    def __attrs_post_init__(self) -> None:
        self.segments = list(self.segments)
        self.start, self.skip = self.segments[0].start, self.segments[0].skip

    def advance(self, next_start: list[tuple[str, Any]] | None) -> None:
        """Continue at ``next_start``, or with the next segment when the current one is read."""
        if next_start is not None:
            self.start = next_start
            return
        self.segments.pop(0)
        if self.segments:
            self.start, self.skip = self.segments[0].start, self.segments[0].skip
        else:
            self.done = True


@attrs.define
class Query:
    tables: list[str] | None  # None: the family's month tables the range spans (listed first)
    key_columns: list[KeyColumn]
    streams: list[list[Segment]]  # per fan-out (bucket, ...): the GetRange calls, in order
    merge_columns: list[str]  # key columns whose values order a merge of several streams
    reverse: bool = False
    limit: int | None = None
    columns: list[str] | None = None
    filter: Condition | None = None
    index: str | None = None
    fetch_missing: bool = False
    page_size: int | None = None
    family_spec: Mapping[str, Any] | None = None  # the fields that pick a family's months

    @classmethod
    def build(cls, codec: ModelCodec, spec: Mapping[str, Any]) -> Query:
        check_names(codec, spec, _OPTIONS, "query")
        spec = dict(spec)
        options = {k: spec.pop(k) for k in _OPTIONS if k in spec}
        index = options.get("index")
        key_columns = codec.index_key_columns(index) if index else codec.key_columns
        limit = options.get("limit")
        for option in ("limit", "page_size"):
            value = options.get(option)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise QueryError(f"{option} must be a positive integer, got {value!r}")
        eq = {name: v for name, v in spec.items() if not isinstance(v, Range)}
        ranges = {name: v for name, v in spec.items() if isinstance(v, Range)}
        eq_by_column = codec.by_column_values(eq)
        reverse = bool(options.get("reverse", False))
        prefix: list[list[Any]] = []  # the possible values of each leading key column
        used: set[str] = set()
        range_column: KeyColumn | None = None
        lower = upper = None
        empty = False  # bounds no key satisfies
        key_filter: Condition | None = None  # fields of a concatenation the range cannot narrow
        for column in key_columns:
            if column.derive is None:
                field = column.field
                if field in eq:
                    prefix.append([eq_by_column[column.column]])
                    used.add(field)
                    continue
                if field in ranges:
                    range_column = column
                    lower, upper = _stored_bounds(codec, field, ranges[field])
                    used.add(field)
                break
            sources = [codec.by_column[s].name for s in column.derive.sources if s in codec.by_column]
            if sources and all(s in eq for s in sources):
                prefix.append([column.derive.derive(eq_by_column)])
                used.update(sources)
                continue
            if isinstance(column.derive, TimeBucket):
                prefix.append(list(column.derive.all_buckets()))
                continue
            if isinstance(column.derive, Descending) and sources and sources[0] in ranges:
                range_column = column
                low, high = _stored_bounds(codec, sources[0], ranges[sources[0]])
                flip = column.derive.flip
                lower = None if high is None else (flip(high[0]), high[1])
                upper = None if low is None else (flip(low[0]), low[1])
                reverse = not reverse  # newest-first keys: the field's order is the reverse scan
                used.add(sources[0])
            elif isinstance(column.derive, Concat):
                plan = _concat_plan(codec, column, eq, eq_by_column, ranges, narrowed=bool(used))
                if plan is not None:
                    range_column = column
                    lower, upper, empty, key_filter = plan.lower, plan.upper, plan.empty, plan.filter
                    used.update(plan.used)
            break
        unused = sorted(set(spec) - used)
        if len(ranges) > 1 and any(name in ranges for name in unused):
            raise QueryError(
                f"{codec.name}: a range applies to one key column; got ranges on "
                f"{', '.join(sorted(ranges))} (use filter= for the others)"
            )
        if unused:
            where = f"index {index!r}" if index else "the primary key"
            concat = [c.column for c in key_columns if isinstance(c.derive, Concat)]
            raise QueryError(
                f"{codec.name}: {', '.join(unused)} cannot narrow this query: {where} is "
                f"({', '.join(c.column for c in key_columns)}) and a query fixes a prefix of it by "
                "equality, then a range on the next column"
                + (f" (a concatenated column, {', '.join(concat)}, is fixed only when all its "
                   "fields are given)" if concat else "")
                + "; use filter= (server-side) or an index"
            )
        fixed = len(prefix)
        rest = [c.column for c in key_columns[fixed + (1 if range_column else 0):]]
        streams = []
        for values in [] if empty else product(*prefix):
            head = [(c.column, v) for c, v in zip(key_columns, values, strict=False)]
            segments = stream_segments(
                head, range_column.column if range_column else None, lower, upper, rest, reverse,
            )
            if segments:
                streams.append(segments)
        # Streams of several buckets or month tables share the fixed prefix: the columns after
        # it order the merge.
        merge_columns = [c.column for c in key_columns[fixed:]]
        columns = options.get("columns")
        if index and codec.family is not None:
            raise QueryError(f"{codec.name} is a table family: its indexes are per month table")
        user_filter = options.get("filter")
        if user_filter is not None:
            _check_filter(codec, user_filter, key_columns)
        return cls(
            tables=[index] if index else [codec.table] if codec.family is None else None,
            key_columns=key_columns, streams=streams, merge_columns=merge_columns,
            reverse=reverse, limit=limit, columns=None if columns is None else list(columns),
            filter=key_filter if user_filter is None else user_filter if key_filter is None
            else user_filter & key_filter,
            index=index, fetch_missing=bool(options.get("fetch_missing", False)),
            page_size=options.get("page_size"),
            family_spec=spec if codec.family is not None else None,
        )


def _check_filter(codec: ModelCodec, condition: Any, key_columns: list[KeyColumn]) -> None:
    """A filter reads attribute columns only: on a key column it would see nothing, silently."""
    if not isinstance(condition, Condition):
        raise QueryError(f"filter= takes a condition such as Attr('x') < 1, got {condition!r}")
    keys = {column.column for column in key_columns}
    for name in sorted(condition.fields()):
        if codec.field(name).column in keys:
            raise QueryError(
                f"{codec.name}: filter on {name}, but {name} is a primary-key column of the "
                "table or index read, and a server-side filter reads attribute columns only; "
                f"bound {name} with {name}=Range(...) (or equality) instead"
            )


@attrs.frozen
class ConcatPlan:
    """How a query reads a concatenated key column it does not fix: one range of keys from the
    fields it fixes and the bounds on the next; later fields it names become a filter."""

    lower: tuple[str, bool] | None
    upper: tuple[str, bool] | None
    empty: bool
    filter: Condition | None
    used: tuple[str, ...]


def _concat_plan(
    codec: ModelCodec, column: KeyColumn, eq: Mapping[str, Any], eq_by_column: Mapping[str, Any],
    ranges: Mapping[str, Range], *, narrowed: bool,
) -> ConcatPlan | None:
    """The key range of a ``Concat`` column for a query that gives equality on its first fields
    and may bound the next one (None: the query names none of its fields).

    The key sorts like the tuple of its fields, so that is one range. A field after the first
    one left open or bounded cannot narrow it further (``a`` in 1..5 and ``b == "x"`` are keys
    scattered through the range): it is filtered on its own column, which the row stores,
    within that range. With nothing before it narrowing the key, that would scan the table:
    refused, so the scan is asked for explicitly with filter=.
    """
    derive = column.derive
    assert isinstance(derive, Concat)
    names = [codec.by_column[s].name for s in derive.fields]
    k = next(i for i, name in enumerate(names) if name not in eq)  # not all: the caller checked
    bounds = ranges.get(names[k])
    later = [name for name in names[k + 1:] if name in eq or name in ranges]
    if k == 0 and bounds is None and not later:
        return None
    shape = f"{column.column} = Concat({', '.join(names)})"
    if later and not (narrowed or k or bounds):
        raise QueryError(
            f"{codec.name}: {', '.join(later)} cannot narrow this query: {shape} sorts by "
            f"{names[0]} first, so without {names[0]} the rows with these values are spread over "
            f"the whole table; give {names[0]} (equality or a range), or scan with filter="
        )
    filters = []
    for name in later:
        if not isinstance(codec.fields[name].declaration, Column):
            raise QueryError(
                f"{codec.name}: {name} cannot narrow this query: in {shape} it follows "
                f"{names[k]}, which the query leaves {'bounded' if bounds else 'open'}, and it "
                "is a key column, which a server-side filter cannot read; give "
                f"{', '.join(names[:names.index(name)])} by equality"
            )
        condition = _field_condition(name, eq[name] if name in eq else ranges[name])
        if condition is not None:
            filters.append(condition)
    fixed = {derive.fields[i]: eq_by_column[derive.fields[i]] for i in range(k)}
    lower, upper = _stored_bounds(codec, names[k], bounds) if bounds else (None, None)
    try:
        span = derive.prefix_range(fixed, lower, upper)
    except KeyDerivationError as exc:
        raise QueryError(f"{codec.name}.{names[k]}: {exc}") from None
    key_filter = None
    for condition in filters:
        key_filter = condition if key_filter is None else key_filter & condition
    return ConcatPlan(
        lower=None if span is None or span[0] is None else (span[0], True),
        upper=None if span is None or span[1] is None else (span[1], False),
        empty=span is None, filter=key_filter,
        used=(*names[:k], *([names[k]] if bounds else []), *later),
    )


def _field_condition(name: str, value: Any) -> Condition | None:
    """A filter that holds where the field equals ``value`` or lies within the Range."""
    if not isinstance(value, Range):
        return Attr(name) == value
    parts = []
    if value.lower is not None:
        parts.append(Attr(name).ge(value.lower[0]) if value.lower[1] else Attr(name).gt(value.lower[0]))
    if value.upper is not None:
        parts.append(Attr(name).le(value.upper[0]) if value.upper[1] else Attr(name).lt(value.upper[0]))
    if not parts:
        return None  # Range() bounds nothing
    return parts[0] if len(parts) == 1 else parts[0] & parts[1]


def family_tables(codec: ModelCodec, spec: Mapping[str, Any], existing: Iterable[str]) -> list[str]:
    """The month tables of a family a query reads (those that exist; a month without a table
    holds no rows)."""
    family = codec.family
    assert family is not None
    value = spec.get(family.field)
    if value is not None and not isinstance(value, Range):
        table = codec.table_for({family.field: value})
        return [table] if table in set(existing) else []
    low = high = None
    if isinstance(value, Range):
        field = codec.field(family.field)
        low = None if value.lower is None else codec.stored(field, value.lower[0])
        high = None if value.upper is None else codec.stored(field, value.upper[0])
    return family.tables_for_range(codec.table, low, high, existing)


def _stored_bounds(codec: ModelCodec, field: str, bounds: Range):
    f = codec.field(field)
    lower = None if bounds.lower is None else (codec.stored(f, bounds.lower[0]), bounds.lower[1])
    upper = None if bounds.upper is None else (codec.stored(f, bounds.upper[0]), bounds.upper[1])
    return lower, upper


@attrs.frozen
class ReadPlan:
    """What every GetRange of a query asks for, worked out once per query."""

    columns: list[str] | None
    filter_bytes: bytes | None  # the filter as GetRange sends it
    hidden: tuple[str, ...]  # fields read only so that the filter sees them; not returned

    @classmethod
    def of(cls, codec: ModelCodec, query: Query) -> ReadPlan:
        filter_bytes = wire.column_filter(sdk_condition(query.filter, codec))
        if query.columns is None:
            return cls(None, filter_bytes, ())
        # The key columns too: a merge orders rows by them, and a row is not a row without them.
        columns = [k.column for k in query.key_columns]
        columns += [c for c in (codec.field(n).column for n in query.columns) if c not in columns]
        # A filter sees only the columns the request reads (a column not read is missing to it).
        hidden = []
        for name in sorted(query.filter.fields()) if query.filter is not None else ():
            column = codec.field(name).column
            if column not in columns:
                columns.append(column)
                hidden.append(name)
        return cls(columns, filter_bytes, tuple(hidden))


def _read_page(cursor: Cursor, read: ReadPlan, page: int | None) -> Op[list[wire.Row]]:
    """The rows of the cursor's next GetRange page (maybe none, with more to come)."""
    segment = cursor.segments[0]
    answer = yield Raw("GetRange", wire.get_range_request(
        cursor.table, segment.backward, cursor.start, segment.end, read.columns, page,
        read.filter_bytes))
    found = wire.page(answer)
    rows = found.rows
    if cursor.skip is not None and rows:
        if rows[0][0] == cursor.skip:
            rows = rows[1:]
        cursor.skip = None
    cursor.advance(found.next_start)
    return rows


def _page_models(codec: ModelCodec, rows: list[wire.Row], query: Query,
                 read: ReadPlan) -> Op[list[Model]]:
    models = list(starmap(codec.row_model, rows))
    if query.fetch_missing and models:
        models = yield from _complete(codec, models, query)
    for name in read.hidden:
        for model in models:
            model.__dict__.pop(name, None)
    return models


def _fetch(codec: ModelCodec, cursor: Cursor, query: Query, read: ReadPlan,
           page: int | None) -> Op[None]:
    """Read the cursor's next rows (an empty page with a next key is not the end)."""
    while True:
        rows = yield from _read_page(cursor, read, page)
        models = yield from _page_models(codec, rows, query, read)
        cursor.rows, cursor.position = models, 0
        if models or cursor.done:
            return


def _complete(codec: ModelCodec, models: list[Model], query: Query) -> Op[list[Model]]:
    """Index rows completed with the columns only the base table has (read by the table's key,
    which every index row carries)."""
    keyed = []
    for model in models:
        values = model.__dict__
        key = []
        for k in codec.key_columns:
            name = codec.by_column[k.column].name
            key.append((k.column, _stored_order(codec, name, values.get(name))))  # datetime: ms
        keyed.append((model, codec.table, key))
    result = yield from batch.get_keys_op(codec, keyed, query.columns)
    completed = []
    for model, full in zip(models, result.rows, strict=True):
        if full is None:
            completed.append(model)  # a global index may trail its table
            continue
        for name, value in model.__dict__.items():
            if value is not None and full.__dict__.get(name) is None:
                full.__dict__[name] = value
        completed.append(full)
    return completed


def range_op(codec: ModelCodec, query: Query) -> Op[None]:
    tables = query.tables
    if tables is None:
        existing = yield Call("list_table")
        tables = family_tables(codec, query.family_spec or {}, existing)
    cursors = [Cursor(table, segments) for table in tables for segments in query.streams]
    if not cursors:
        return
    read = ReadPlan.of(codec, query)
    if len(cursors) > 1:
        yield from _merge(codec, cursors, query, read)
        return
    cursor = cursors[0]
    remaining = query.limit
    # Models are made as the caller takes them (starmap): a page of them never lives at once,
    # which spares the garbage collector most of its work on large results.
    lazy = not query.fetch_missing and not read.hidden
    while not cursor.done:
        page = query.page_size
        if remaining is not None:
            page = min(remaining, page or PAGE_ROWS)
        rows = yield from _read_page(cursor, read, page)
        if remaining is not None:
            rows = rows[:remaining]
            remaining -= len(rows)
        if rows and lazy:
            yield Emit(starmap(codec.row_model, rows))
        elif rows:
            yield Emit((yield from _page_models(codec, rows, query, read)))
        if remaining == 0:
            return


def _merge(codec: ModelCodec, cursors: list[Cursor], query: Query, read: ReadPlan) -> Op[None]:
    """Several streams (buckets, month tables) merged in key order."""
    names = [codec.by_column[c].name for c in query.merge_columns if c in codec.by_column]

    def order(model: Model) -> tuple[Any, ...]:
        values = model.__dict__
        return tuple(_stored_order(codec, name, values.get(name)) for name in names)

    live = []
    for cursor in cursors:
        yield from _fetch(codec, cursor, query, read, query.page_size)
        if cursor.rows:
            live.append(cursor)
    emitted = 0
    batch_out: list[Model] = []
    while live:
        pick = live[0]
        best = order(pick.rows[pick.position])
        for cursor in live[1:]:
            candidate = order(cursor.rows[cursor.position])
            if (candidate > best) if query.reverse else (candidate < best):
                pick, best = cursor, candidate
        batch_out.append(pick.rows[pick.position])
        emitted += 1
        if query.limit is not None and emitted >= query.limit:
            break
        pick.position += 1
        if pick.position >= len(pick.rows):
            if batch_out:
                yield Emit(batch_out)
                batch_out = []
            if pick.done:
                live.remove(pick)
            else:
                yield from _fetch(codec, pick, query, read, query.page_size)
                if not pick.rows:
                    live.remove(pick)
    if batch_out:
        yield Emit(batch_out)


def _stored_order(codec: ModelCodec, name: str, value: Any) -> Any:
    field = codec.fields[name]
    return codec.stored(field, value) if field.converts and value is not None else value


# -- search indexes ------------------------------------------------------------------------------

_SEARCH_OPTIONS = ("query", "sort", "limit", "columns", "offset")


def _search_query(codec: ModelCodec, spec: Mapping[str, Any]) -> Any:
    must = []
    if spec.get("query") is not None:
        must.append(spec["query"])
    for name, value in spec.items():
        if name in _SEARCH_OPTIONS:
            continue
        field = codec.field(name)
        column = field.column
        if isinstance(value, Range):
            lower, upper = value.lower, value.upper
            must.append(md.RangeQuery(
                column,
                None if lower is None else codec.stored(field, lower[0]),
                None if upper is None else codec.stored(field, upper[0]),
                include_lower=bool(lower and lower[1]), include_upper=bool(upper and upper[1]),
            ))
        elif isinstance(value, Match):
            must.append(md.MatchQuery(column, value.text))
        elif isinstance(value, Prefix):
            must.append(md.PrefixQuery(column, value.prefix))
        elif isinstance(value, Exists):
            must.append(md.ExistsQuery(column))
        elif isinstance(value, (list, tuple, set, frozenset)):
            must.append(md.TermsQuery(column, [codec.stored(field, v) for v in value]))
        else:
            must.append(md.TermQuery(column, codec.stored(field, value)))
    if not must:
        return md.MatchAllQuery()
    return must[0] if len(must) == 1 else md.BoolQuery(must_queries=must)


def _search_sort(codec: ModelCodec, sort: Iterable[str] | None) -> md.Sort | None:
    if not sort:
        return None
    sorters = []
    for spec in [sort] if isinstance(sort, str) else sort:
        descending = spec.startswith("-")
        name = spec.lstrip("+-")
        order = md.SortOrder.DESC if descending else md.SortOrder.ASC
        if name == "pk":
            sorters.append(md.PrimaryKeySort(order))
        else:
            sorters.append(md.FieldSort(codec.field(name).column, order))
    return md.Sort(sorters=sorters)


def _check_search(codec: ModelCodec, index: str) -> None:
    if codec.family is not None:
        raise QueryError(
            f"{codec.name} is a table family: search its month tables' indexes one by one"
        )
    if index not in codec.search_indexes:
        raise QueryError(
            f"{codec.name} declares no search index {index!r}; search indexes: "
            f"{', '.join(codec.search_indexes) or 'none'}"
        )


def search_op(codec: ModelCodec, index: str, spec: Mapping[str, Any]) -> Op[None]:
    _check_search(codec, index)
    check_names(codec, spec, _SEARCH_OPTIONS, "search")
    query = _search_query(codec, spec)
    sort = _search_sort(codec, spec.get("sort"))
    limit = spec.get("limit")
    columns = spec.get("columns")
    to_get = (
        md.ColumnsToGet(return_type=md.ColumnReturnType.ALL) if columns is None
        else md.ColumnsToGet([codec.field(n).column for n in columns], md.ColumnReturnType.SPECIFIED)
    )
    token = None
    offset = spec.get("offset")
    remaining = limit
    while True:
        page = SEARCH_PAGE if remaining is None else min(SEARCH_PAGE, remaining)
        request = md.SearchQuery(query, sort=None if token else sort, next_token=token,
                                 limit=page, offset=None if token else offset)
        response = yield Call("search", codec.table, index, request, to_get)
        models = [codec.to_model(pk, attributes) for pk, attributes in response.rows]
        if remaining is not None:
            models = models[:remaining]
            remaining -= len(models)
        if models:
            yield Emit(models)
        token = response.next_token
        if not token or remaining == 0:
            return


def count_op(codec: ModelCodec, index: str, spec: Mapping[str, Any]) -> Op[int]:
    _check_search(codec, index)
    check_names(codec, spec, ("query",), "count")  # a count has no sort, page or columns
    request = md.SearchQuery(_search_query(codec, spec), limit=0, get_total_count=True)
    response = yield Call("search", codec.table, index, request,
                          md.ColumnsToGet(return_type=md.ColumnReturnType.NONE))
    return response.total_count
