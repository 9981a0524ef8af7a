"""Hypothesis strategies for schema IR values that pass ``validate_catalog``.

``valid_tables()`` and ``valid_catalogs()`` draw random but valid schemas: 1-4 primary-key
columns (STRING / INTEGER / BINARY, at most one auto-increment INTEGER column, never first),
defined columns of every type, options that obey every rule, 0-2 secondary indexes that meet
their prerequisites, 0-1 search index with fields matching their columns, a stream spec, and
optionally key derivations, attribute (non-predefined) columns and access patterns.

Names are unique across a catalog: tables, secondary indexes and search indexes never share one.

The keyword flags turn off the parts that are not physical (``attributes``, ``access_patterns``)
or not visible to inspection of a live instance (``derive``), for tests that compare a catalog
with what a server reports back.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs
from hypothesis import strategies as st

from tsmigrate.keys import ALPHABETS, INT64_MAX, Concat, Descending, HashPrefix, TimeBucket
from tsmigrate.schema import (
    ANALYZERS,
    ASC,
    BINARY,
    BOOLEAN,
    DEFINED_COLUMN_TYPES,
    DESC,
    DOUBLE,
    GLOBAL,
    INTEGER,
    LOCAL,
    NO_TTL,
    PRIMARY_KEY_TYPES,
    STRING,
    AccessPattern,
    AttributeColumn,
    Catalog,
    DefinedColumn,
    IndexSorter,
    PrimaryKeyColumn,
    ReservedThroughput,
    SearchField,
    SearchIndex,
    SecondaryIndex,
    StreamSpec,
    Table,
    TableOptions,
)
from tsmigrate.schema.validate import (
    INDEX_KEY_TYPES,
    INT32_MAX,
    MAX_RESERVED_CU,
    MAX_STREAM_HOURS,
    MAX_TABLES_PER_INSTANCE,
    MAX_TIME_DEVIATION,
    MIN_TTL,
    VECTOR_METRICS,
)

Draw = Callable[[st.SearchStrategy[Any]], Any]
T = TypeVar("T")

FIRST_CHARS = string.ascii_letters + "_"
NAME_CHARS = string.ascii_letters + string.digits + "_"
MAX_SECONDARY_PER_TABLE = 2

# A separator that sorts below every character of each named alphabet.
SEPARATORS = {"digits": ",", "hex": ",", "alnum": ",", "identifier": ",", "printable": " "}

SORTABLE_SEARCH_TYPES = ("LONG", "DOUBLE", "BOOLEAN", "KEYWORD", "DATE", "GEO_POINT")
ARRAY_SEARCH_TYPES = ("LONG", "DOUBLE", "BOOLEAN", "KEYWORD", "DATE")
SUB_FIELD_TYPES = ("KEYWORD", "LONG", "DOUBLE", "BOOLEAN", "TEXT", "DATE")
DATE_FORMATS = ("yyyy-MM-dd", "yyyy-MM-dd HH:mm:ss", "yyyy-MM-dd'T'HH:mm:ss.SSSZ")
# Search types a column of each table type can feed ("ARRAY": a STRING holding a JSON array).
# JSON fields are left out: the IR has no json_type / sub-field schema for them yet.
SEARCH_TYPES_FOR_COLUMN = {
    INTEGER: ("LONG", "DATE"),
    DOUBLE: ("DOUBLE",),
    BOOLEAN: ("BOOLEAN",),
    STRING: ("KEYWORD", "TEXT", "DATE", "GEO_POINT", "NESTED", "VECTOR", "ARRAY"),
}


def names(max_size: int = 12) -> st.SearchStrategy[str]:
    """Valid Tablestore names (``[A-Za-z_][A-Za-z0-9_]*``), short; see ``_fresh`` for long ones."""
    return st.builds(
        lambda first, rest: first + rest,
        st.sampled_from(FIRST_CHARS),
        st.text(NAME_CHARS, max_size=max_size - 1),
    )


# Generation speed: fixed strategies are built once, and choices among run-time lists draw an
# index (``st.integers`` is cached by its arguments) instead of building a ``sampled_from``.
_NAMES = names()
_FIRST = st.sampled_from(FIRST_CHARS)
_BOOL = st.booleans()
_TTLS = st.one_of(
    st.just(NO_TTL), st.sampled_from([MIN_TTL, 30 * MIN_TTL, INT32_MAX]), st.integers(MIN_TTL, INT32_MAX)
)
_DEVIATIONS = st.one_of(st.sampled_from([0, 86400, MAX_TIME_DEVIATION]), st.integers(0, MAX_TIME_DEVIATION))
_MAX_VERSIONS = st.one_of(st.integers(1, 10), st.just(INT32_MAX))
_CU = st.integers(0, MAX_RESERVED_CU)
_STREAM_HOURS = st.integers(1, MAX_STREAM_HOURS)
_ANALYZER_PARAMETERS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "single_word": st.fixed_dictionaries(
        {}, optional={"case_sensitive": st.booleans(), "delimit_word": st.booleans()}
    ),
    "split": st.fixed_dictionaries({}, optional={"delimiter": st.sampled_from([",", ";", " "])}),
    "fuzzy": st.fixed_dictionaries(
        {}, optional={"min_chars": st.integers(1, 3), "max_chars": st.integers(4, 7)}
    ),
    "max_word": st.just({}),
    "min_word": st.just({}),
}


def ttls() -> st.SearchStrategy[int]:
    """-1 (never expire) or a valid TTL, edges included."""
    return _TTLS


def _pick(draw: Draw, items: Sequence[T]) -> T:
    return items[draw(st.integers(0, len(items) - 1))]


def _subset(draw: Draw, items: Sequence[T], max_size: int | None = None, min_size: int = 0) -> list[T]:
    """Distinct items of ``items`` (by position), in drawn order."""
    if not items:
        return []
    limit = len(items) if max_size is None else min(max_size, len(items))
    picks = draw(st.lists(st.integers(0, len(items) - 1), unique=True, min_size=min_size, max_size=limit))
    return [items[i] for i in picks]


def _chance(draw: Draw, one_in: int) -> bool:
    """True about once in ``one_in`` draws; shrinks to False."""
    return draw(st.integers(0, one_in - 1)) == one_in - 1


def _fresh(draw: Draw, taken: set[str]) -> str:
    """A valid name not in ``taken`` (then added to it); now and then the longest allowed."""
    name = draw(_FIRST) * 255 if _chance(draw, 25) else draw(_NAMES)
    if name in taken:
        base, suffix = name[:240], len(taken)
        while f"{base}_{suffix}" in taken:
            suffix += 1
        name = f"{base}_{suffix}"
    taken.add(name)
    return name


# --- key derivations -----------------------------------------------------------------------------


def _derivation(draw: Draw, output_type: str, sources: Sequence[tuple[str, str]]) -> Any:
    """A valid derivation producing ``output_type``, reading only columns whose values it can
    derive from (integers for TimeBucket / Descending, strings or integers otherwise); None
    when no source fits."""
    if output_type == INTEGER:
        integers = [name for name, type_ in sources if type_ == INTEGER]
        if not integers:
            return None
        if draw(_BOOL):
            return TimeBucket(_pick(draw, integers), draw(st.integers(2, 4096)))
        return Descending(_pick(draw, integers), draw(st.integers(1, INT64_MAX)))
    usable = [(name, type_) for name, type_ in sources if type_ in (STRING, INTEGER)]
    if not usable:
        return None
    if len(usable) < 2 or draw(_BOOL):
        return HashPrefix(
            _pick(draw, usable)[0], draw(st.integers(1, 32)), _pick(draw, ("|", ",", "#", "", "_"))
        )
    chosen = _subset(draw, usable, min_size=2, max_size=4)
    alphabet = _pick(draw, sorted(ALPHABETS))
    pad = {name: draw(st.integers(1, 19)) for name, type_ in chosen if type_ == INTEGER}
    return Concat([name for name, _ in chosen], sep=SEPARATORS[alphabet], pad=pad, alphabet=alphabet)


# --- search indexes ------------------------------------------------------------------------------


def _search_field(draw: Draw, name: str, field_type: str, *, top_level: bool = True) -> SearchField:
    kwargs: dict[str, Any] = {"store": draw(_BOOL)}
    if field_type in SORTABLE_SEARCH_TYPES:
        kwargs["index"] = draw(_BOOL)
        kwargs["sort_and_agg"] = top_level and draw(_BOOL)
    if field_type == "TEXT":
        analyzer = _pick(draw, (None, *ANALYZERS))
        kwargs["analyzer"] = analyzer
        if analyzer is not None:
            kwargs["analyzer_parameters"] = draw(_ANALYZER_PARAMETERS[analyzer])
    elif field_type == "DATE":
        kwargs["date_formats"] = _subset(draw, DATE_FORMATS, max_size=2)
    elif field_type == "VECTOR":
        kwargs["vector_dimension"] = 4096 if _chance(draw, 8) else draw(st.integers(1, 16))
        kwargs["vector_metric"] = _pick(draw, VECTOR_METRICS)
    elif field_type == "NESTED":
        taken: set[str] = set()
        kwargs["sub_fields"] = [
            _search_field(draw, _fresh(draw, taken), _pick(draw, SUB_FIELD_TYPES), top_level=False)
            for _ in range(draw(st.integers(1, 3)))
        ]
    return SearchField(name, field_type, **kwargs)


def _column_field(draw: Draw, name: str, column_type: str) -> SearchField:
    choice = _pick(draw, SEARCH_TYPES_FOR_COLUMN[column_type])
    if choice == "ARRAY":
        return attrs.evolve(_search_field(draw, name, _pick(draw, ARRAY_SEARCH_TYPES)), is_array=True)
    return _search_field(draw, name, choice)


def _search_index(
    draw: Draw,
    taken: set[str],
    columns: Sequence[tuple[str, str]],
    pk_names: Sequence[str],
    options: TableOptions,
) -> SearchIndex | None:
    searchable = [(n, t) for n, t in columns if t in SEARCH_TYPES_FOR_COLUMN]
    if not searchable:
        return None
    fields = [_column_field(draw, n, t) for n, t in _subset(draw, searchable, min_size=1, max_size=5)]
    routing = _subset(draw, pk_names, max_size=2)
    index_sort: list[IndexSorter] = []
    if not any(f.type == "NESTED" for f in fields):  # no presort with NESTED fields
        for field in _subset(draw, [f for f in fields if f.sort_and_agg], max_size=2):
            mode = _pick(draw, (None, "MIN", "MAX", "AVG")) if field.is_array else None
            index_sort.append(IndexSorter(field.name, _pick(draw, (ASC, DESC)), mode))
        if draw(_BOOL):
            index_sort.append(IndexSorter(None, _pick(draw, (ASC, DESC))))
    table_ttl = options.time_to_live
    if table_ttl != NO_TTL:  # at most the table's (allow_update is already False)
        ttl = table_ttl if draw(_BOOL) else draw(st.integers(MIN_TTL, table_ttl))
    elif not options.allow_update:
        ttl = draw(_TTLS)
    else:
        ttl = NO_TTL
    return SearchIndex(_fresh(draw, taken), fields, routing, index_sort, ttl)


# --- tables and catalogs -------------------------------------------------------------------------


def _draw_table(
    draw: Draw,
    taken: set[str],
    *,
    max_secondary_indexes: int = MAX_SECONDARY_PER_TABLE,
    search_indexes: bool = True,
    derive: bool = True,
    attributes: bool = True,
    access_patterns: bool = True,
    streams: bool = True,
) -> Table:
    table_name = _fresh(draw, taken)
    columns: set[str] = set()  # column names within this table

    pk_types = [_pick(draw, PRIMARY_KEY_TYPES) for _ in range(draw(st.integers(1, 4)))]
    pk_names = [_fresh(draw, columns) for _ in pk_types]
    auto = _pick(draw, (None, *(i for i in range(1, len(pk_types)) if pk_types[i] == INTEGER)))
    defined = [
        DefinedColumn(_fresh(draw, columns), _pick(draw, DEFINED_COLUMN_TYPES))
        for _ in range(draw(st.integers(0, 6)))
    ]
    attribute_columns = [
        AttributeColumn(_fresh(draw, columns), _pick(draw, DEFINED_COLUMN_TYPES))
        for _ in range(draw(st.integers(0, 3)) if attributes else 0)
    ]
    sources = [(c.name, c.type) for c in (*defined, *attribute_columns)]
    primary_key = []
    for i, (name, type_) in enumerate(zip(pk_names, pk_types, strict=True)):
        derivation = None
        if derive and i != auto and type_ != BINARY and _chance(draw, 4):
            derivation = _derivation(draw, type_, sources)
        primary_key.append(PrimaryKeyColumn(name, type_, auto_increment=i == auto, derivation=derivation))

    n_secondary = draw(st.integers(0, max_secondary_indexes))
    with_search = search_indexes and draw(_BOOL)
    indexed = n_secondary > 0 or with_search
    ttl = draw(_TTLS)
    options = TableOptions(
        time_to_live=ttl,
        # Indexes need one version, and with a TTL a table with indexes must not allow updates.
        max_versions=1 if indexed else draw(_MAX_VERSIONS),
        max_time_deviation=draw(_DEVIATIONS),
        allow_update=False if indexed and ttl != NO_TTL else draw(_BOOL),
    )
    throughput = ReservedThroughput(read=draw(_CU), write=draw(_CU))

    auto_name = pk_names[auto] if auto is not None else None
    key_pool = pk_names + [c.name for c in defined if c.type in INDEX_KEY_TYPES]
    secondary = []
    for _ in range(n_secondary):
        index_type = _pick(draw, (GLOBAL, LOCAL))
        # A local index is led by the partition key; a global one by any key column but the
        # auto-increment one (which is never the partition key).
        first = pk_names[0] if index_type == LOCAL else _pick(draw, [k for k in key_pool if k != auto_name])
        keys = [first, *_subset(draw, [k for k in key_pool if k != first], max_size=3)]
        include = _subset(draw, [c.name for c in defined if c.name not in keys])
        secondary.append(
            SecondaryIndex(_fresh(draw, taken), keys, include, index_type, include_base_data=draw(_BOOL))
        )

    search = []
    if with_search:
        all_columns = [*zip(pk_names, pk_types, strict=True), *sources]
        index = _search_index(draw, taken, all_columns, pk_names, options)
        if index is not None:
            search.append(index)

    stream = StreamSpec()
    if streams:
        stream = StreamSpec(enabled=draw(_BOOL), expiration_hours=draw(_STREAM_HOURS))

    patterns = []
    if access_patterns:
        column_names = [*pk_names, *(n for n, _ in sources)]
        pattern_names: set[str] = set()
        for _ in range(draw(st.integers(0, 2))):
            eq = _subset(draw, column_names, max_size=2)
            ranged = _pick(draw, [None, *column_names])
            order = _pick(draw, [None, *column_names, *(f"-{n}" for n in column_names)])
            patterns.append(AccessPattern(_fresh(draw, pattern_names), eq, ranged, order))

    return Table(
        name=table_name,
        primary_key=primary_key,
        defined_columns=defined,
        options=options,
        throughput=throughput,
        secondary_indexes=secondary,
        search_indexes=search,
        stream=stream,
        attributes=attribute_columns,
        access_patterns=patterns,
    )


@st.composite
def valid_tables(draw: Draw, **flags: Any) -> Table:
    """One valid table. Flags: ``max_secondary_indexes`` (default 2), ``search_indexes``,
    ``derive``, ``attributes``, ``access_patterns``, ``streams`` (each default True)."""
    return _draw_table(draw, set(), **flags)


@st.composite
def valid_catalogs(draw: Draw, max_tables: int = 3, min_tables: int = 0, **flags: Any) -> Catalog:
    """A valid catalog of ``min_tables`` to ``max_tables`` tables; flags as for ``valid_tables``."""
    per_table = 1 + flags.get("max_secondary_indexes", MAX_SECONDARY_PER_TABLE)
    if max_tables * per_table > MAX_TABLES_PER_INSTANCE:
        raise ValueError(f"{max_tables} tables with their indexes could exceed the instance quota")
    taken: set[str] = set()
    count = draw(st.integers(min_tables, max_tables))
    return Catalog(tables=[_draw_table(draw, taken, **flags) for _ in range(count)])


def _changed_table(draw: Draw, table: Table, taken: set[str]) -> Table:
    """A random change of ``table`` that keeps its key: options, throughput, secondary indexes
    dropped, search indexes dropped, replaced (same name, another definition) or added, defined
    columns added and dropped, stream switched. ``taken``: names used in the catalog."""
    indexes = list(table.secondary_indexes)
    if indexes and draw(_BOOL):
        indexes.remove(_pick(draw, indexes))
    # Search indexes: each kept, dropped or replaced; then maybe a new one.
    fates = [_pick(draw, ("keep", "drop", "replace")) for _ in table.search_indexes]
    search_plan = [(i, fate) for i, fate in zip(table.search_indexes, fates, strict=True) if fate != "drop"]
    add_search = _chance(draw, 2)

    ttl = draw(_TTLS)
    indexed = bool(indexes or search_plan or add_search)
    options = TableOptions(
        time_to_live=ttl,
        max_versions=1 if indexed else draw(_MAX_VERSIONS),
        max_time_deviation=draw(_DEVIATIONS),
        allow_update=False if indexed and ttl != NO_TTL else draw(_BOOL),
    )
    throughput = ReservedThroughput(read=draw(_CU), write=draw(_CU)) if draw(_BOOL) else table.throughput

    # Defined columns: add a new one; drop one nothing uses (indexes kept, key derivations).
    defined = list(table.defined_columns)
    if draw(_BOOL):
        used = {c.name for c in (*table.primary_key, *table.defined_columns, *table.attributes)}
        defined.append(DefinedColumn(_fresh(draw, used), _pick(draw, DEFINED_COLUMN_TYPES)))
    pk_names = [c.name for c in table.primary_key]
    columns = [(c.name, c.type) for c in (*table.primary_key, *defined, *table.attributes)]

    search = []
    for index, fate in search_plan:
        if fate == "replace":
            fresh = _search_index(draw, set(), columns, pk_names, options)
            if fresh is not None and fresh.fields:
                search.append(attrs.evolve(fresh, name=index.name))
                continue
        # A kept search index expires with its table: the only TTL valid for every table TTL.
        search.append(attrs.evolve(index, time_to_live=ttl))
    if add_search:
        added = _search_index(draw, taken, columns, pk_names, options)
        if added is not None:
            search.append(added)

    used = {c for i in indexes for c in (*i.keys, *i.include)} | {f.name for i in search for f in i.fields}
    used |= {s for c in table.primary_key if c.derivation is not None for s in c.derivation.sources}
    droppable = [c for c in defined if c.name not in used]
    if droppable and draw(_BOOL):
        defined.remove(_pick(draw, droppable))
    stream = table.stream
    if draw(_BOOL):
        stream = StreamSpec(enabled=draw(_BOOL), expiration_hours=draw(_STREAM_HOURS))
    return attrs.evolve(
        table, options=options, throughput=throughput, secondary_indexes=indexes, search_indexes=search,
        defined_columns=defined, stream=stream,
    )


@st.composite
def catalog_changes(draw: Draw, max_tables: int = 3, **flags: Any) -> tuple[Catalog, Catalog]:
    """Two valid catalogs, the second a random evolution of the first: tables kept, changed
    (options, throughput, indexes dropped, search indexes replaced or added, columns) or dropped,
    and new tables added."""
    before = draw(valid_catalogs(max_tables=max_tables, **flags))
    taken = {t.name for t in before.tables}
    taken |= {i.name for t in before.tables for i in (*t.secondary_indexes, *t.search_indexes)}
    after = []
    for table in before.tables:
        fate = draw(st.sampled_from(("keep", "change", "change", "drop")))
        if fate != "drop":
            after.append(_changed_table(draw, table, taken) if fate == "change" else table)
    for _ in range(draw(st.integers(0, max_tables - len(after)))):
        after.append(_draw_table(draw, taken, **flags))
    return before, Catalog(tables=after)
