"""Every rule of ``tsmigrate.schema.validate``: a minimal table that breaks exactly that rule (reported with
the rule's name and the right field) and a counterpart that passes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import attrs
import pytest
import strategies
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tsmigrate.errors import Problem, SchemaError
from tsmigrate.keys import Concat, HashPrefix, TimeBucket
from tsmigrate.schema import (
    BINARY,
    BOOLEAN,
    DOUBLE,
    GLOBAL,
    INTEGER,
    LOCAL,
    STRING,
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
    validate,
)
from tsmigrate.schema.validate import check_catalog, validate_catalog

DAY = 86400
SOURCE = "app.models.Thing"  # the model a table was compiled from


def pk(name: str = "pk", type_: str = STRING, auto: bool = False, derivation=None) -> PrimaryKeyColumn:
    return PrimaryKeyColumn(name, type_, auto_increment=auto, derivation=derivation)


def table(name: str = "t", primary_key=None, **changes) -> Table:
    """A minimal valid table, changed by keyword."""
    primary_key = [pk()] if primary_key is None else primary_key
    return Table(name=name, primary_key=primary_key, source=SOURCE, **changes)


def with_x(**changes) -> Table:
    """A table with a STRING defined column ``x``, ready for indexes."""
    return table(defined_columns=[DefinedColumn("x", STRING)], **changes)


def index(keys=("x",), include=(), name: str = "idx", type_: str = GLOBAL) -> SecondaryIndex:
    return SecondaryIndex(name, keys, include, type_)


def search(*fields: SearchField, name: str = "s", **changes) -> SearchIndex:
    return SearchIndex(name, fields or [SearchField("pk", "KEYWORD")], **changes)


def searched(*fields: SearchField, columns=(), options=None, **index_changes) -> Table:
    """A table whose search index ``s`` has ``fields`` over the given extra defined columns."""
    return table(
        defined_columns=list(columns),
        options=options or TableOptions(),
        search_indexes=[search(*fields, **index_changes)],
    )


def nested(depth: int) -> SearchField:
    """NESTED fields nested ``depth`` levels deep (names l1..lN), a KEYWORD leaf at the bottom."""
    field = SearchField("leaf", "KEYWORD")
    for level in range(depth, 0, -1):
        field = SearchField(f"l{level}", "NESTED", sub_fields=[field])
    return attrs.evolve(field, name="x")


def catalog_of(value: Table | Catalog) -> Catalog:
    return value if isinstance(value, Catalog) else Catalog(tables=[value])


def problems_of(value: Table | Catalog) -> list[Problem]:
    return validate_catalog(catalog_of(value))


class Case(NamedTuple):
    id: str
    rule: str
    field: str
    bad: Table | Catalog
    good: Table | Catalog
    also: frozenset[str] = frozenset()  # rules that the breakage cannot avoid breaking too


TTL_OFF = TableOptions(time_to_live=DAY, allow_update=False)
MANY = 33

CASES = [
    # --- names -----------------------------------------------------------------------------------
    Case("table-digit-first", "name.table", "table", table("1t"), table("t1")),
    Case("table-dash", "name.table", "table", table("my-table"), table("my_table")),
    Case("table-256-bytes", "name.table", "table", table("t" * 256), table("t" * 255)),
    Case("table-empty", "name.table", "table", table(""), table("_")),
    Case("table-unicode", "name.table", "table", table("表"), table("biao")),
    Case("replaces-invalid", "name.table", "replaces", table(replaces="old-t"), table(replaces="old_t")),
    Case(
        "pk-column-dash",
        "name.column",
        "pk-1",
        table(primary_key=[pk("pk-1")]),
        table(primary_key=[pk("pk_1")]),
    ),
    Case(
        "defined-column-digit",
        "name.column",
        "2x",
        table(defined_columns=[DefinedColumn("2x", STRING)]),
        table(defined_columns=[DefinedColumn("x2", STRING)]),
    ),
    Case(
        "attribute-unicode",
        "name.column",
        "é",
        table(attributes=[AttributeColumn("é", STRING)]),
        table(attributes=[AttributeColumn("e", STRING)]),
    ),
    Case(
        "column-256-bytes",
        "name.column",
        "c" * 256,
        table(primary_key=[pk("c" * 256)]),
        table(primary_key=[pk("c" * 255)]),
    ),
    Case("replaces-self", "replaces.self", "replaces", table(replaces="t"), table(replaces="t_v1")),
    # --- primary key -----------------------------------------------------------------------------
    Case("pk-none", "primary-key.count", "primary_key", table(primary_key=[]), table()),
    Case(
        "pk-five",
        "primary-key.count",
        "primary_key",
        table(primary_key=[pk(f"k{i}") for i in range(5)]),
        table(primary_key=[pk(f"k{i}") for i in range(4)]),
    ),
    Case(
        "pk-duplicate",
        "primary-key.duplicate",
        "a",
        table(primary_key=[pk("a"), pk("a", INTEGER)]),
        table(primary_key=[pk("a"), pk("b", INTEGER)]),
    ),
    Case(
        "pk-double",
        "primary-key.type",
        "score",
        table(primary_key=[pk(), pk("score", DOUBLE)]),
        table(primary_key=[pk(), pk("score", INTEGER)]),
    ),
    Case(
        "pk-boolean",
        "primary-key.type",
        "flag",
        table(primary_key=[pk(), pk("flag", BOOLEAN)]),
        table(primary_key=[pk(), pk("flag", BINARY)]),
    ),
    Case(
        "pk-unknown-type",
        "primary-key.type",
        "pk",
        table(primary_key=[pk("pk", "FLOAT")]),
        table(primary_key=[pk("pk", STRING)]),
    ),
    # --- auto-increment --------------------------------------------------------------------------
    Case(
        "auto-two",
        "auto-increment.count",
        "a, b",
        table(primary_key=[pk(), pk("a", INTEGER, auto=True), pk("b", INTEGER, auto=True)]),
        table(primary_key=[pk(), pk("a", INTEGER, auto=True), pk("b", INTEGER)]),
    ),
    Case(
        "auto-string",
        "auto-increment.type",
        "a",
        table(primary_key=[pk(), pk("a", STRING, auto=True)]),
        table(primary_key=[pk(), pk("a", INTEGER, auto=True)]),
    ),
    Case(
        "auto-first",
        "auto-increment.partition-key",
        "a",
        table(primary_key=[pk("a", INTEGER, auto=True), pk("b")]),
        table(primary_key=[pk("b"), pk("a", INTEGER, auto=True)]),
    ),
    Case(
        "auto-derived",
        "auto-increment.derived",
        "a",
        table(
            primary_key=[pk(), pk("a", INTEGER, auto=True, derivation=TimeBucket("ts"))],
            defined_columns=[DefinedColumn("ts", INTEGER)],
        ),
        table(
            primary_key=[pk(), pk("a", INTEGER, auto=True)], defined_columns=[DefinedColumn("ts", INTEGER)]
        ),
    ),
    # --- key derivations -------------------------------------------------------------------------
    Case(
        "hash-length-0",
        "key-derivation.invalid",
        "pk",
        table(
            primary_key=[pk(derivation=HashPrefix("dev", length=0))],
            attributes=[AttributeColumn("dev", STRING)],
        ),
        table(
            primary_key=[pk(derivation=HashPrefix("dev", length=4))],
            attributes=[AttributeColumn("dev", STRING)],
        ),
    ),
    Case(
        "concat-colon-sep",
        "key-derivation.order",
        "pk",
        table(
            primary_key=[pk(derivation=Concat(["a", "b"], sep=":"))],
            attributes=[AttributeColumn("a", STRING), AttributeColumn("b", STRING)],
        ),
        table(
            primary_key=[pk(derivation=Concat(["a", "b"], sep=","))],
            attributes=[AttributeColumn("a", STRING), AttributeColumn("b", STRING)],
        ),
    ),
    Case(
        "concat-one-field",
        "key-derivation.invalid",
        "pk",
        table(primary_key=[pk(derivation=Concat(["a"]))], attributes=[AttributeColumn("a", STRING)]),
        table(primary_key=[pk(derivation=HashPrefix("a"))], attributes=[AttributeColumn("a", STRING)]),
    ),
    Case(
        "derived-type",
        "key-derivation.type",
        "pk",
        table(
            primary_key=[pk("pk", INTEGER, derivation=HashPrefix("dev"))],
            attributes=[AttributeColumn("dev", STRING)],
        ),
        table(
            primary_key=[pk("pk", STRING, derivation=HashPrefix("dev"))],
            attributes=[AttributeColumn("dev", STRING)],
        ),
    ),
    Case(
        "derived-missing-source",
        "key-derivation.source",
        "pk",
        table(primary_key=[pk(derivation=HashPrefix("dev"))]),
        table(primary_key=[pk(derivation=HashPrefix("dev"))], defined_columns=[DefinedColumn("dev", STRING)]),
    ),
    Case(
        "derived-from-itself",
        "key-derivation.source",
        "pk",
        table(primary_key=[pk(derivation=HashPrefix("pk"))]),
        table(primary_key=[pk(derivation=HashPrefix("dev"))], attributes=[AttributeColumn("dev", STRING)]),
    ),
    # --- defined and attribute columns -----------------------------------------------------------
    Case(
        "defined-33",
        "defined-column.count",
        "defined_columns",
        table(defined_columns=[DefinedColumn(f"c{i}", STRING) for i in range(33)]),
        table(defined_columns=[DefinedColumn(f"c{i}", STRING) for i in range(32)]),
    ),
    Case(
        "defined-and-attribute-same-name",
        "column.duplicate",
        "x",
        table(defined_columns=[DefinedColumn("x", STRING)], attributes=[AttributeColumn("x", STRING)]),
        table(defined_columns=[DefinedColumn("x", STRING)], attributes=[AttributeColumn("y", STRING)]),
    ),
    Case(
        "defined-twice",
        "column.duplicate",
        "x",
        table(defined_columns=[DefinedColumn("x", STRING), DefinedColumn("x", INTEGER)]),
        table(defined_columns=[DefinedColumn("x", STRING), DefinedColumn("y", INTEGER)]),
    ),
    Case(
        "defined-named-like-pk",
        "column.clashes-with-primary-key",
        "pk",
        table(defined_columns=[DefinedColumn("pk", STRING)]),
        table(defined_columns=[DefinedColumn("pk2", STRING)]),
    ),
    Case(
        "attribute-named-like-pk",
        "column.clashes-with-primary-key",
        "pk",
        table(attributes=[AttributeColumn("pk", INTEGER)]),
        table(attributes=[AttributeColumn("pk2", INTEGER)]),
    ),
    Case(
        "defined-float-type",
        "column.type",
        "x",
        table(defined_columns=[DefinedColumn("x", "FLOAT")]),
        table(defined_columns=[DefinedColumn("x", DOUBLE)]),
    ),
    Case(
        "attribute-unknown-type",
        "column.type",
        "x",
        table(attributes=[AttributeColumn("x", "DECIMAL")]),
        table(attributes=[AttributeColumn("x", BOOLEAN)]),
    ),
    # --- table options and throughput ------------------------------------------------------------
    *[
        Case(
            f"ttl-{bad}",
            "options.ttl",
            "ttl",
            table(options=TableOptions(time_to_live=bad)),
            table(options=TableOptions(time_to_live=good)),
        )
        for bad, good in [(0, -1), (-2, DAY), (DAY - 1, DAY), (2**31, 2**31 - 1)]
    ],
    *[
        Case(
            f"max-versions-{bad}",
            "options.max-versions",
            "max_versions",
            table(options=TableOptions(max_versions=bad)),
            table(options=TableOptions(max_versions=good)),
        )
        for bad, good in [(0, 1), (-1, 3), (2**31, 2**31 - 1)]
    ],
    *[
        Case(
            f"deviation-{bad}",
            "options.max-time-deviation",
            "max_time_deviation",
            table(options=TableOptions(max_time_deviation=bad)),
            table(options=TableOptions(max_time_deviation=good)),
        )
        for bad, good in [(-1, 0), (validate.MAX_TIME_DEVIATION + 1, validate.MAX_TIME_DEVIATION)]
    ],
    Case(
        "read-negative",
        "throughput.range",
        "reserved_read",
        table(throughput=ReservedThroughput(read=-1)),
        table(throughput=ReservedThroughput(read=0)),
    ),
    Case(
        "write-over-limit",
        "throughput.range",
        "reserved_write",
        table(throughput=ReservedThroughput(write=100_001)),
        table(throughput=ReservedThroughput(write=100_000)),
    ),
    # --- secondary-index prerequisites -----------------------------------------------------------
    Case(
        "index-multi-version",
        "secondary-index.max-versions",
        "index idx",
        with_x(options=TableOptions(max_versions=2), secondary_indexes=[index()]),
        with_x(options=TableOptions(max_versions=1), secondary_indexes=[index()]),
    ),
    Case(
        "index-ttl-updatable",
        "secondary-index.ttl-allow-update",
        "index idx",
        with_x(options=TableOptions(time_to_live=DAY), secondary_indexes=[index()]),
        with_x(options=TTL_OFF, secondary_indexes=[index()]),
    ),
    Case(
        "index-updatable-no-ttl",
        "secondary-index.ttl-allow-update",
        "index idx",
        with_x(options=TableOptions(time_to_live=DAY, allow_update=True), secondary_indexes=[index()]),
        with_x(options=TableOptions(time_to_live=-1, allow_update=True), secondary_indexes=[index()]),
    ),
    # --- secondary indexes -----------------------------------------------------------------------
    Case(
        "six-indexes",
        "secondary-index.count",
        "indexes",
        with_x(secondary_indexes=[index(name=f"i{n}") for n in range(6)]),
        with_x(secondary_indexes=[index(name=f"i{n}") for n in range(5)]),
    ),
    Case(
        "index-name-dash",
        "name.index",
        "index by-x",
        with_x(secondary_indexes=[index(name="by-x")]),
        with_x(secondary_indexes=[index(name="by_x")]),
    ),
    Case(
        "index-unknown-type",
        "secondary-index.type",
        "index idx",
        with_x(secondary_indexes=[index(type_="HYBRID")]),
        with_x(secondary_indexes=[index(type_=GLOBAL)]),
    ),
    Case(
        "index-no-keys",
        "secondary-index.key-count",
        "index idx",
        with_x(secondary_indexes=[index(keys=[])]),
        with_x(secondary_indexes=[index(keys=["x"])]),
    ),
    Case(
        "index-five-keys",
        "secondary-index.key-count",
        "index idx",
        table(
            defined_columns=[DefinedColumn(c, STRING) for c in "abcd"],
            secondary_indexes=[index(keys=["a", "b", "c", "d", "pk"])],
        ),
        table(
            defined_columns=[DefinedColumn(c, STRING) for c in "abcd"],
            secondary_indexes=[index(keys=["a", "b", "c", "d"])],
        ),
    ),
    Case(
        "index-key-twice",
        "secondary-index.duplicate",
        "index idx",
        with_x(secondary_indexes=[index(keys=["x", "x"])]),
        with_x(secondary_indexes=[index(keys=["x", "pk"])]),
    ),
    Case(
        "index-unknown-key",
        "secondary-index.unknown-column",
        "index idx",
        with_x(secondary_indexes=[index(keys=["nope"])]),
        with_x(secondary_indexes=[index(keys=["x"])]),
    ),
    Case(
        "index-key-not-defined",
        "secondary-index.unknown-column",
        "index idx",
        table(attributes=[AttributeColumn("x", STRING)], secondary_indexes=[index(keys=["x"])]),
        table(defined_columns=[DefinedColumn("x", STRING)], secondary_indexes=[index(keys=["x"])]),
    ),
    Case(
        "index-unknown-include",
        "secondary-index.unknown-column",
        "index idx",
        with_x(secondary_indexes=[index(include=["nope"])]),
        table(
            defined_columns=[DefinedColumn("x", STRING), DefinedColumn("nope", INTEGER)],
            secondary_indexes=[index(include=["nope"])],
        ),
    ),
    Case(
        "index-double-key",
        "secondary-index.key-type",
        "index idx",
        table(
            defined_columns=[DefinedColumn("x", STRING), DefinedColumn("score", DOUBLE)],
            secondary_indexes=[index(keys=["score"])],
        ),
        table(
            defined_columns=[DefinedColumn("x", STRING), DefinedColumn("score", DOUBLE)],
            secondary_indexes=[index(keys=["x"], include=["score"])],
        ),
    ),
    Case(
        "index-include-33",
        "secondary-index.include-count",
        "index idx",
        table(
            defined_columns=[DefinedColumn(f"c{i}", STRING) for i in range(MANY + 1)],
            secondary_indexes=[index(keys=["c0"], include=[f"c{i}" for i in range(1, MANY + 1)])],
        ),
        table(
            defined_columns=[DefinedColumn(f"c{i}", STRING) for i in range(MANY - 1)],
            secondary_indexes=[index(keys=["pk"], include=[f"c{i}" for i in range(MANY - 1)])],
        ),
        also=frozenset({"defined-column.count"}),
    ),
    Case(
        "index-includes-pk",
        "secondary-index.include-key",
        "index idx",
        with_x(secondary_indexes=[index(include=["pk"])]),
        table(
            defined_columns=[DefinedColumn("x", STRING), DefinedColumn("y", STRING)],
            secondary_indexes=[index(include=["y"])],
        ),
    ),
    Case(
        "index-includes-its-key",
        "secondary-index.include-key",
        "index idx",
        with_x(secondary_indexes=[index(keys=["x"], include=["x"])]),
        with_x(secondary_indexes=[index(keys=["x"], include=[])]),
    ),
    Case(
        "local-index-not-led-by-partition-key",
        "secondary-index.local-partition-key",
        "index idx",
        with_x(secondary_indexes=[index(keys=["x"], type_=LOCAL)]),
        with_x(secondary_indexes=[index(keys=["pk", "x"], type_=LOCAL)]),
    ),
    Case(
        "index-led-by-auto-increment",
        "secondary-index.auto-increment",
        "index idx",
        with_x(primary_key=[pk(), pk("seq", INTEGER, auto=True)], secondary_indexes=[index(keys=["seq"])]),
        with_x(
            primary_key=[pk(), pk("seq", INTEGER, auto=True)], secondary_indexes=[index(keys=["x", "seq"])]
        ),
    ),
    # --- search-index prerequisites --------------------------------------------------------------
    Case(
        "search-multi-version",
        "search-index.max-versions",
        "search index s",
        searched(options=TableOptions(max_versions=3)),
        searched(options=TableOptions(max_versions=1)),
    ),
    Case(
        "search-table-ttl-updatable",
        "search-index.ttl-allow-update",
        "search index s",
        searched(options=TableOptions(time_to_live=DAY), time_to_live=DAY),
        searched(options=TTL_OFF, time_to_live=DAY),
    ),
    Case(
        "search-ttl-updatable",
        "search-index.ttl-allow-update",
        "search index s",
        searched(options=TableOptions(allow_update=True), time_to_live=DAY),
        searched(options=TableOptions(allow_update=False), time_to_live=DAY),
    ),
    # --- search indexes --------------------------------------------------------------------------
    Case(
        "search-twice",
        "search-index.duplicate",
        "search index s",
        table(search_indexes=[search(name="s"), search(name="s")]),
        table(search_indexes=[search(name="s"), search(name="s2")]),
    ),
    Case(
        "search-name-dash",
        "name.search-index",
        "search index s-1",
        searched(name="s-1"),
        searched(name="s_1"),
    ),
    Case(
        "search-named-like-table",
        "name.search-index",
        "search index t",
        searched(name="t"),
        searched(name="t_search"),
    ),
    Case(
        "search-no-fields",
        "search-index.no-fields",
        "search index s",
        table(search_indexes=[SearchIndex("s", [])]),
        table(search_indexes=[SearchIndex("s", [SearchField("pk", "KEYWORD")])]),
    ),
    Case(
        "search-1001-fields",
        "search-index.field-count",
        "search index s",
        table(
            attributes=[AttributeColumn(f"a{i}", STRING) for i in range(1001)],
            search_indexes=[SearchIndex("s", [SearchField(f"a{i}", "KEYWORD") for i in range(1001)])],
        ),
        table(
            attributes=[AttributeColumn(f"a{i}", STRING) for i in range(1001)],
            search_indexes=[SearchIndex("s", [SearchField(f"a{i}", "KEYWORD") for i in range(1000)])],
        ),
    ),
    Case(
        "search-field-twice",
        "search-index.duplicate-field",
        "search index s.x",
        searched(SearchField("x", "KEYWORD"), SearchField("x", "TEXT"), columns=[DefinedColumn("x", STRING)]),
        searched(
            SearchField("x", "KEYWORD"), SearchField("pk", "TEXT"), columns=[DefinedColumn("x", STRING)]
        ),
    ),
    Case(
        "search-unknown-column",
        "search-index.unknown-column",
        "search index s.nope",
        searched(SearchField("nope", "KEYWORD")),
        searched(SearchField("pk", "KEYWORD")),
    ),
    Case(
        "search-keyword-on-integer",
        "search-index.field-column-type",
        "search index s.n",
        searched(SearchField("n", "KEYWORD"), columns=[DefinedColumn("n", INTEGER)]),
        searched(SearchField("n", "LONG"), columns=[DefinedColumn("n", INTEGER)]),
    ),
    Case(
        "search-long-on-double",
        "search-index.field-column-type",
        "search index s.n",
        searched(SearchField("n", "LONG"), columns=[DefinedColumn("n", DOUBLE)]),
        searched(SearchField("n", "DOUBLE"), columns=[DefinedColumn("n", DOUBLE)]),
    ),
    Case(
        "search-array-on-integer",
        "search-index.field-column-type",
        "search index s.n",
        searched(SearchField("n", "LONG", is_array=True), columns=[DefinedColumn("n", INTEGER)]),
        searched(SearchField("n", "LONG", is_array=True), columns=[DefinedColumn("n", STRING)]),
    ),
    Case(
        "search-binary-column",
        "search-index.field-column-type",
        "search index s.b",
        searched(SearchField("b", "KEYWORD"), columns=[DefinedColumn("b", BINARY)]),
        searched(SearchField("b", "KEYWORD"), columns=[DefinedColumn("b", STRING)]),
    ),
    Case(
        "search-fuzzy-keyword",
        "search-index.field-type",
        "search index s.pk",
        searched(SearchField("pk", "FUZZY_KEYWORD")),
        searched(SearchField("pk", "KEYWORD")),
    ),
    Case(
        "search-sub-field-type",
        "search-index.field-type",
        "search index s.ip",
        searched(
            SearchField("x", "NESTED", sub_fields=[SearchField("ip", "IP")]),
            columns=[DefinedColumn("x", STRING)],
        ),
        searched(
            SearchField("x", "NESTED", sub_fields=[SearchField("ip", "KEYWORD")]),
            columns=[DefinedColumn("x", STRING)],
        ),
    ),
    Case(
        "search-analyzer-on-keyword",
        "search-index.analyzer",
        "search index s.pk",
        searched(SearchField("pk", "KEYWORD", analyzer="max_word")),
        searched(SearchField("pk", "TEXT", analyzer="max_word")),
    ),
    Case(
        "search-unknown-analyzer",
        "search-index.analyzer",
        "search index s.pk",
        searched(SearchField("pk", "TEXT", analyzer="ik_smart")),
        searched(SearchField("pk", "TEXT", analyzer="fuzzy", analyzer_parameters={"min_chars": 1})),
    ),
    Case(
        "nested-without-sub-fields",
        "search-index.nested",
        "search index s.x",
        searched(SearchField("x", "NESTED"), columns=[DefinedColumn("x", STRING)]),
        searched(
            SearchField("x", "NESTED", sub_fields=[SearchField("a", "LONG")]),
            columns=[DefinedColumn("x", STRING)],
        ),
    ),
    Case(
        "nested-sorted",
        "search-index.nested",
        "search index s.x",
        searched(
            SearchField("x", "NESTED", sort_and_agg=True, sub_fields=[SearchField("a", "LONG")]),
            columns=[DefinedColumn("x", STRING)],
        ),
        searched(
            SearchField("x", "NESTED", sub_fields=[SearchField("a", "LONG", sort_and_agg=True)]),
            columns=[DefinedColumn("x", STRING)],
        ),
    ),
    Case(
        "sub-fields-on-keyword",
        "search-index.nested",
        "search index s.x",
        searched(
            SearchField("x", "KEYWORD", sub_fields=[SearchField("a", "LONG")]),
            columns=[DefinedColumn("x", STRING)],
        ),
        searched(SearchField("x", "KEYWORD"), columns=[DefinedColumn("x", STRING)]),
    ),
    Case(
        "nested-six-levels",
        "search-index.nested",
        "search index s.l6",
        searched(nested(6), columns=[DefinedColumn("x", STRING)]),
        searched(nested(5), columns=[DefinedColumn("x", STRING)]),
    ),
    Case(
        "nested-101-sub-fields",
        "search-index.nested",
        "search index s.x",
        searched(
            SearchField("x", "NESTED", sub_fields=[SearchField(f"a{i}", "LONG") for i in range(101)]),
            columns=[DefinedColumn("x", STRING)],
        ),
        searched(
            SearchField("x", "NESTED", sub_fields=[SearchField(f"a{i}", "LONG") for i in range(100)]),
            columns=[DefinedColumn("x", STRING)],
        ),
    ),
    Case(
        "text-sorted",
        "search-index.text-sort",
        "search index s.pk",
        searched(SearchField("pk", "TEXT", sort_and_agg=True)),
        searched(SearchField("pk", "KEYWORD", sort_and_agg=True)),
    ),
    Case(
        "vector-without-dimension",
        "search-index.vector",
        "search index s.v",
        searched(SearchField("v", "VECTOR", vector_metric="cosine"), columns=[DefinedColumn("v", STRING)]),
        searched(
            SearchField("v", "VECTOR", vector_metric="cosine", vector_dimension=4096),
            columns=[DefinedColumn("v", STRING)],
        ),
    ),
    Case(
        "vector-too-wide",
        "search-index.vector",
        "search index s.v",
        searched(
            SearchField("v", "VECTOR", vector_metric="cosine", vector_dimension=4097),
            columns=[DefinedColumn("v", STRING)],
        ),
        searched(
            SearchField("v", "VECTOR", vector_metric="cosine", vector_dimension=1),
            columns=[DefinedColumn("v", STRING)],
        ),
    ),
    Case(
        "vector-unknown-metric",
        "search-index.vector",
        "search index s.v",
        searched(
            SearchField("v", "VECTOR", vector_metric="manhattan", vector_dimension=8),
            columns=[DefinedColumn("v", STRING)],
        ),
        searched(
            SearchField("v", "VECTOR", vector_metric="dot_product", vector_dimension=8),
            columns=[DefinedColumn("v", STRING)],
        ),
    ),
    Case(
        "six-vectors",
        "search-index.vector",
        "search index s",
        searched(
            *[
                SearchField(f"v{i}", "VECTOR", vector_metric="euclidean", vector_dimension=4)
                for i in range(6)
            ],
            columns=[DefinedColumn(f"v{i}", STRING) for i in range(6)],
        ),
        searched(
            *[
                SearchField(f"v{i}", "VECTOR", vector_metric="euclidean", vector_dimension=4)
                for i in range(5)
            ],
            columns=[DefinedColumn(f"v{i}", STRING) for i in range(6)],
        ),
    ),
    Case(
        "date-format-on-keyword",
        "search-index.date-format",
        "search index s.pk",
        searched(SearchField("pk", "KEYWORD", date_formats=["yyyy-MM-dd"])),
        searched(SearchField("pk", "DATE", date_formats=["yyyy-MM-dd"])),
    ),
    Case(
        "routing-not-pk",
        "search-index.routing",
        "search index s",
        searched(columns=[DefinedColumn("x", STRING)], routing_fields=["x"]),
        searched(columns=[DefinedColumn("x", STRING)], routing_fields=["pk"]),
    ),
    Case(
        "presort-unsortable-field",
        "search-index.sort",
        "search index s",
        searched(SearchField("pk", "KEYWORD"), index_sort=[IndexSorter("pk")]),
        searched(SearchField("pk", "KEYWORD", sort_and_agg=True), index_sort=[IndexSorter("pk")]),
    ),
    Case(
        "presort-bad-order",
        "search-index.sort",
        "search index s",
        searched(index_sort=[IndexSorter(None, "UP")]),
        searched(index_sort=[IndexSorter(None, "DESC")]),
    ),
    Case(
        "presort-with-nested",
        "search-index.sort",
        "search index s",
        searched(
            SearchField("x", "NESTED", sub_fields=[SearchField("a", "LONG")]),
            columns=[DefinedColumn("x", STRING)],
            index_sort=[IndexSorter(None)],
        ),
        searched(
            SearchField("x", "NESTED", sub_fields=[SearchField("a", "LONG")]),
            columns=[DefinedColumn("x", STRING)],
        ),
    ),
    Case(
        "search-ttl-below-a-day",
        "search-index.ttl",
        "search index s",
        searched(options=TableOptions(allow_update=False), time_to_live=100),
        searched(options=TableOptions(allow_update=False), time_to_live=DAY),
    ),
    Case(
        "search-ttl-zero",
        "search-index.ttl",
        "search index s",
        searched(options=TableOptions(allow_update=False), time_to_live=0),
        searched(options=TableOptions(allow_update=False), time_to_live=-1),
    ),
    Case(
        "search-ttl-above-table",
        "search-index.ttl-above-table",
        "search index s",
        searched(options=TTL_OFF, time_to_live=2 * DAY),
        searched(options=TTL_OFF, time_to_live=DAY),
    ),
    Case(
        "search-forever-on-expiring-table",
        "search-index.ttl-above-table",
        "search index s",
        searched(options=TTL_OFF, time_to_live=-1),
        searched(options=TTL_OFF, time_to_live=DAY),
    ),
    # --- stream ----------------------------------------------------------------------------------
    Case(
        "stream-zero-hours",
        "stream.expiration",
        "stream",
        table(stream=StreamSpec(True, 0)),
        table(stream=StreamSpec(True, 1)),
    ),
    Case(
        "stream-169-hours",
        "stream.expiration",
        "stream",
        table(stream=StreamSpec(True, 169)),
        table(stream=StreamSpec(True, 168)),
    ),
    # --- instance-wide ---------------------------------------------------------------------------
    Case(
        "two-tables-same-name",
        "name.instance-unique",
        "table",
        Catalog(tables=[table("t"), table("t")]),
        Catalog(tables=[table("t"), table("u")]),
    ),
    Case(
        "replaces-a-declared-table",
        "replaces.declared",
        "replaces",
        Catalog(tables=[table("t"), table("t_v2", replaces="t")]),
        Catalog(tables=[table("t_v2", replaces="t")]),
    ),
    Case(
        "replaces-in-a-cycle",
        "replaces.cycle",
        "replaces",
        Catalog(tables=[table("a", replaces="b"), table("b", replaces="a")]),
        Catalog(tables=[table("b", replaces="a")]),
    ),
    Case(
        "replaces-a-chain",
        "replaces.declared",
        "replaces",
        Catalog(tables=[table("a", replaces="b"), table("b", replaces="c"), table("c")]),
        Catalog(tables=[table("a", replaces="b"), table("c")]),
    ),
    Case(
        "index-named-like-other-table",
        "name.instance-unique",
        "index t",
        Catalog(tables=[table("t"), with_x(name="u", secondary_indexes=[index(name="t")])]),
        Catalog(tables=[table("t"), with_x(name="u", secondary_indexes=[index(name="u_by_x")])]),
    ),
    Case(
        "index-named-like-its-table",
        "name.instance-unique",
        "index t",
        with_x(secondary_indexes=[index(name="t")]),
        with_x(secondary_indexes=[index(name="t_by_x")]),
    ),
    Case(
        "two-indexes-same-name",
        "name.instance-unique",
        "index by_x",
        Catalog(tables=[with_x(name=n, secondary_indexes=[index(name="by_x")]) for n in ("t", "u")]),
        Catalog(tables=[with_x(name=n, secondary_indexes=[index(name=f"{n}_by_x")]) for n in ("t", "u")]),
    ),
    Case(
        "65-tables",
        "instance.table-quota",
        "table",
        Catalog(tables=[table(f"t{i}") for i in range(65)]),
        Catalog(tables=[table(f"t{i}") for i in range(64)]),
    ),
    Case(
        "index-tables-count",
        "instance.table-quota",
        "table",
        Catalog(
            tables=[
                with_x(name=f"t{i}", secondary_indexes=[index(name=f"t{i}_a"), index(name=f"t{i}_b")])
                for i in range(22)
            ]
        ),
        Catalog(
            tables=[
                with_x(name=f"t{i}", secondary_indexes=[index(name=f"t{i}_a"), index(name=f"t{i}_b")])
                for i in range(21)
            ]
        ),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_breaking_a_rule_reports_it(case: Case) -> None:
    problems = problems_of(case.bad)
    assert {p.rule for p in problems} == {case.rule} | case.also, problems
    reported = [p for p in problems if p.rule == case.rule]
    assert case.field in {p.field for p in reported}, reported
    for problem in reported:
        assert problem.message
        assert problem.model == SOURCE
        if case.rule == "instance.table-quota":  # names the tables that do not fit
            assert problem.table and f"table(s) {problem.table}" in problem.message


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_fixed_counterpart_passes(case: Case) -> None:
    assert problems_of(case.good) == []
    check_catalog(catalog_of(case.good))  # does not raise


def _rules_in_source() -> set[str]:
    """Every rule name validate.py can emit, read from its source (f"{kind}.x" expanded)."""
    text = Path(validate.__file__).read_text(encoding="utf-8")
    rules = set(re.findall(r'"((?:[a-z]+-)*[a-z]+\.(?:[a-z]+-)*[a-z]+)"', text))
    for template in re.findall(r'f"\{kind\}\.((?:[a-z]+-)*[a-z]+)"', text):
        rules |= {f"secondary-index.{template}", f"search-index.{template}"}
    return rules


def test_every_rule_of_the_validator_has_a_case() -> None:
    emitted = _rules_in_source()
    assert len(emitted) > 40  # the extraction itself works
    covered = {c.rule for c in CASES}
    assert emitted - covered == set(), "rules without a test case"
    assert covered - emitted == set(), "test cases for rules the validator does not have"


def test_problems_are_collected_into_one_error() -> None:
    broken = Table(
        name="bad-name",
        primary_key=[pk("id", DOUBLE), pk("seq", STRING, auto=True)],
        defined_columns=[DefinedColumn("id", STRING), DefinedColumn("x", STRING)],
        options=TableOptions(time_to_live=5, max_versions=2),
        secondary_indexes=[index(keys=["nope"])],
        stream=StreamSpec(True, 500),
        source="app.models.Broken",
    )
    with pytest.raises(SchemaError) as caught:
        check_catalog(Catalog(tables=[broken]))
    error = caught.value
    rules = {p.rule for p in error.problems}
    assert rules >= {
        "name.table",
        "primary-key.type",
        "auto-increment.type",
        "column.clashes-with-primary-key",
        "options.ttl",
        "secondary-index.max-versions",
        "secondary-index.unknown-column",
        "stream.expiration",
    }
    assert len(error.problems) >= 8
    text = str(error)
    assert text.startswith(f"{len(error.problems)} schema problems:")
    for problem in error.problems:
        assert str(problem) in text
    # Each line names the model, the table, the field and the rule, and says how to fix it.
    assert (
        "app.models.Broken (table 'bad-name'), index idx: index key 'nope' is neither a primary-key "
        "column nor a defined column [secondary-index.unknown-column]" in text
    )
    assert "app.models.Broken (table 'bad-name'), id: DOUBLE is an invalid type" in text
    assert "[primary-key.type]\n    fix: use str (STRING), int (INTEGER) or bytes (BINARY)" in text


def test_problems_of_several_tables_are_collected_together() -> None:
    catalog = Catalog(tables=[table("a", primary_key=[pk("k", DOUBLE)]), table("b", options=TableOptions(0))])
    with pytest.raises(SchemaError) as caught:
        check_catalog(catalog)
    assert {(p.table, p.rule) for p in caught.value.problems} == {
        ("a", "primary-key.type"),
        ("b", "options.ttl"),
    }


def test_problem_without_a_model_still_names_the_table() -> None:
    problem = problems_of(Table(name="t", primary_key=[pk("k", DOUBLE)]))[0]
    assert problem.model == ""
    assert str(problem).startswith("table 't', k: DOUBLE is an invalid type")


def test_a_single_problem_is_not_pluralised() -> None:
    error = SchemaError(problems_of(table(options=TableOptions(max_versions=0))))
    assert str(error).startswith("1 schema problem:\n")


def test_names_of_the_wrong_python_type_are_problems_not_crashes() -> None:
    problems = problems_of(Table(name=None, primary_key=[pk(5)]))  # type: ignore[arg-type]
    assert {p.rule for p in problems} == {"name.table", "name.column"}


def test_an_empty_catalog_is_valid() -> None:
    assert validate_catalog(Catalog()) == []


# --- generated schemas ---------------------------------------------------------------------------


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategies.valid_catalogs(max_tables=4))
@pytest.mark.slow
def test_generated_catalogs_are_valid(catalog: Catalog) -> None:
    assert validate_catalog(catalog) == []
    names = [t.name for t in catalog.tables]
    names += [i.name for t in catalog.tables for i in (*t.secondary_indexes, *t.search_indexes)]
    assert len(names) == len(set(names)), "tables and indexes share one namespace"


@settings(max_examples=30, deadline=None)
@given(strategies.valid_tables(derive=False, attributes=False, access_patterns=False, search_indexes=False))
def test_generated_tables_honour_the_flags(table_: Table) -> None:
    assert validate_catalog(Catalog(tables=[table_])) == []
    assert table_.attributes == () and table_.access_patterns == () and table_.search_indexes == ()
    assert all(c.derivation is None for c in table_.primary_key)


@settings(max_examples=50, deadline=None)
@given(strategies.valid_tables(), st.data())
def test_breaking_a_generated_table_is_reported(table_: Table, data: st.DataObject) -> None:
    """Whatever else the table declares, a broken rule is reported (with others it implies)."""
    breakage = data.draw(st.sampled_from(["ttl", "pk-type", "clash", "max-versions", "stream"]))
    if breakage == "ttl":
        broken, rule = (
            attrs.evolve(table_, options=attrs.evolve(table_.options, time_to_live=0)),
            "options.ttl",
        )
    elif breakage == "pk-type":
        broken = attrs.evolve(table_, primary_key=[*table_.primary_key[:3], pk("zz_double", DOUBLE)])
        rule = "primary-key.type"
    elif breakage == "clash":
        first = table_.primary_key[0].name
        broken = attrs.evolve(table_, defined_columns=[*table_.defined_columns, DefinedColumn(first, STRING)])
        rule = "column.clashes-with-primary-key"
    elif breakage == "max-versions":
        broken = attrs.evolve(table_, options=attrs.evolve(table_.options, max_versions=0))
        rule = "options.max-versions"
    else:
        broken, rule = attrs.evolve(table_, stream=StreamSpec(True, 0)), "stream.expiration"
    assert rule in {p.rule for p in problems_of(broken)}
