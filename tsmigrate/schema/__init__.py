"""The schema IR: one vocabulary for models, inspection, diff, lint, plan and rendering.

Frozen attrs values. Collections that are sets in Tablestore (defined columns, indexes, search
fields, tables) are sorted by name on construction, so equality, the canonical dict and the
fingerprint do not depend on declaration order. Sequences whose order matters (primary-key
columns, index key columns, index sort) keep it.

Type names are plain strings ("STRING", "INTEGER", ...) rather than enums so that the IR can hold
an invalid schema (a DOUBLE primary key, say) long enough for validation to report it.

This module is the package's own; around it, what produces and checks the IR: ``model``
(declarative Model classes), ``families`` (a table per month), ``validate`` (Tablestore's rules),
``render`` (human-readable text), ``adopt`` (model source written back from a live schema),
``config`` and ``discover`` (a project's settings, and importing the models they name).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from tsmigrate.keys import Derivation, derivation_from_dict

# Public (README "Public API"): the IR, as revision scripts and tools build and read it. The
# modules of this package (model, families, validate, ...) are internal.
__all__ = [
    "ANALYZERS", "ANALYZER_DEFAULTS", "ASC", "BINARY", "BOOLEAN", "DEFINED_COLUMN_TYPES", "DESC",
    "DOUBLE", "FORMAT_VERSION", "GLOBAL", "INDEX_TYPES", "INTEGER", "LOCAL", "NO_TTL",
    "PRIMARY_KEY_TYPES", "SEARCH_FIELD_TYPES", "STRING", "AccessPattern", "AttributeColumn",
    "Catalog", "DefinedColumn", "IndexSorter", "PrimaryKeyColumn", "ReservedThroughput",
    "SearchField", "SearchIndex", "SecondaryIndex", "StreamSpec", "Table", "TableOptions",
    "catalog_from_dict", "catalog_to_dict", "fingerprint", "physical", "physical_table",
    "search_index_from_dict", "search_index_to_dict", "table_from_dict", "table_to_dict",
]

# Column types, as Tablestore names them.
STRING, INTEGER, BINARY, DOUBLE, BOOLEAN = "STRING", "INTEGER", "BINARY", "DOUBLE", "BOOLEAN"
PRIMARY_KEY_TYPES = (STRING, INTEGER, BINARY)
DEFINED_COLUMN_TYPES = (STRING, INTEGER, DOUBLE, BOOLEAN, BINARY)

GLOBAL, LOCAL = "GLOBAL", "LOCAL"
INDEX_TYPES = (GLOBAL, LOCAL)

# Search-index field types (wire names of search.proto's FieldType).
SEARCH_FIELD_TYPES = (
    "LONG", "DOUBLE", "BOOLEAN", "KEYWORD", "TEXT", "NESTED", "GEO_POINT", "DATE", "VECTOR", "JSON",
)
ANALYZERS = ("single_word", "max_word", "min_word", "fuzzy", "split")
# Parameter values the service assumes when none are given. Only other values are kept in the
# IR, so a declared field and the same field read back from the service are equal.
ANALYZER_DEFAULTS: dict[str, dict[str, Any]] = {
    "single_word": {"case_sensitive": False, "delimit_word": False},
    "split": {"delimiter": " "},
    "fuzzy": {"min_chars": 1, "max_chars": 7},
}
ASC, DESC = "ASC", "DESC"

NO_TTL = -1  # Tablestore's "never expire"


def _by_name(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(sorted(items, key=lambda item: item.name))


def _strings(items: Iterable[str]) -> tuple[str, ...]:
    if isinstance(items, str):
        return (items,)
    return tuple(items)


def _sorted_strings(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(_strings(items)))


@attrs.frozen
class PrimaryKeyColumn:
    name: str
    type: str
    auto_increment: bool = False
    derivation: Derivation | None = None


@attrs.frozen
class DefinedColumn:
    name: str
    type: str


@attrs.frozen
class AttributeColumn:
    """A column the model declares but Tablestore does not (not predefined): used by lint and
    validation to know the attribute's type; it has no physical existence to diff."""

    name: str
    type: str


@attrs.frozen
class TableOptions:
    time_to_live: int = NO_TTL
    max_versions: int = 1
    max_time_deviation: int = 86400
    allow_update: bool = True


@attrs.frozen
class ReservedThroughput:
    read: int = 0
    write: int = 0


@attrs.frozen
class SecondaryIndex:
    name: str
    keys: tuple[str, ...] = attrs.field(converter=_strings)
    include: tuple[str, ...] = attrs.field(default=(), converter=_sorted_strings)
    type: str = GLOBAL
    include_base_data: bool = True

    def primary_key(self, table: Table) -> tuple[str, ...]:
        """The index table's key: its key columns, then the base key columns it lacks."""
        return self.keys + tuple(c.name for c in table.primary_key if c.name not in self.keys)


@attrs.frozen
class SearchField:
    name: str
    type: str
    index: bool = True
    sort_and_agg: bool = False
    store: bool = False
    is_array: bool = False
    analyzer: str | None = None
    analyzer_parameters: tuple[tuple[str, Any], ...] = attrs.field(
        default=(), converter=lambda v: tuple(sorted(dict(v).items()))
    )
    sub_fields: tuple[SearchField, ...] = attrs.field(default=(), converter=_by_name)
    date_formats: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    vector_dimension: int | None = None
    vector_metric: str | None = None

    def __attrs_post_init__(self) -> None:
        defaults = ANALYZER_DEFAULTS.get(self.analyzer or "", {})
        kept = tuple((k, v) for k, v in self.analyzer_parameters if k not in defaults or defaults[k] != v)
        object.__setattr__(self, "analyzer_parameters", kept)


@attrs.frozen
class IndexSorter:
    """One presort key of a search index: a field, or the primary key when ``field`` is None."""

    field: str | None = None
    order: str = ASC
    mode: str | None = None  # MIN / MAX / AVG for array fields


@attrs.frozen
class SearchIndex:
    name: str
    fields: tuple[SearchField, ...] = attrs.field(converter=_by_name)
    routing_fields: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    index_sort: tuple[IndexSorter, ...] = attrs.field(default=(), converter=tuple)
    time_to_live: int = NO_TTL

    def __attrs_post_init__(self) -> None:
        # The service presorts an index without NESTED fields by the primary key, ascending,
        # when told nothing, and describes it with that sorter: declaring exactly it is the same
        # index as declaring none. (An index with NESTED fields cannot be presorted at all.)
        if self.index_sort == (IndexSorter(None, ASC),) and all(f.type != "NESTED" for f in self.fields):
            object.__setattr__(self, "index_sort", ())


@attrs.frozen
class StreamSpec:
    enabled: bool = False
    expiration_hours: int = 24


@attrs.frozen
class AccessPattern:
    """A query a service relies on: equality on some columns, an optional range, an order."""

    name: str
    eq: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    range: str | None = None
    order_by: str | None = None  # column name, "-name" for descending


@attrs.frozen
class Table:
    name: str
    primary_key: tuple[PrimaryKeyColumn, ...] = attrs.field(converter=tuple)
    defined_columns: tuple[DefinedColumn, ...] = attrs.field(default=(), converter=_by_name)
    options: TableOptions = TableOptions()
    throughput: ReservedThroughput = ReservedThroughput()
    secondary_indexes: tuple[SecondaryIndex, ...] = attrs.field(default=(), converter=_by_name)
    search_indexes: tuple[SearchIndex, ...] = attrs.field(default=(), converter=_by_name)
    stream: StreamSpec = StreamSpec()
    attributes: tuple[AttributeColumn, ...] = attrs.field(default=(), converter=_by_name)
    access_patterns: tuple[AccessPattern, ...] = attrs.field(default=(), converter=_by_name)
    replaces: str | None = None
    # How services write rows: "put" (whole rows) or "update" (UpdateRow: partial, increments).
    writes: str = "put"
    # Lint codes suppressed on this table, each with the reason a reviewer reads.
    lint_ignore: tuple[tuple[str, str], ...] = attrs.field(
        default=(), converter=lambda v: tuple(sorted(dict(v).items()))
    )
    # Where the table was declared (e.g. "models.telemetry.Telemetry"); not part of the schema.
    source: str = attrs.field(default="", eq=False)

    def column_type(self, name: str) -> str | None:
        """The type of a primary-key, defined or declared attribute column, if known."""
        for column in (*self.primary_key, *self.defined_columns, *self.attributes):
            if column.name == name:
                return column.type
        return None

    @property
    def primary_key_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.primary_key)


@attrs.frozen
class Catalog:
    tables: tuple[Table, ...] = attrs.field(default=(), converter=_by_name)

    def table(self, name: str) -> Table | None:
        return next((t for t in self.tables if t.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return catalog_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Catalog:
        return catalog_from_dict(data)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True, ensure_ascii=False)

    def fingerprint(self) -> str:
        return fingerprint(self.to_dict())


# --- canonical dict form -------------------------------------------------------------------------

FORMAT_VERSION = 1


def fingerprint(canonical: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON: stable across processes, Python versions and key order."""
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _plain(value: Any) -> Any:
    """attrs value -> JSON-ready structure (tuples become lists)."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if attrs.has(type(value)):
        return {a.name: _plain(getattr(value, a.name)) for a in attrs.fields(type(value)) if a.eq}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def table_to_dict(table: Table) -> dict[str, Any]:
    data = _plain(table)
    data["lint_ignore"] = dict(table.lint_ignore)
    data["search_indexes"] = [search_index_to_dict(i) for i in table.search_indexes]
    return data


def _field_params_to_dict(field: dict[str, Any]) -> None:
    field["analyzer_parameters"] = dict(field["analyzer_parameters"])
    for sub in field["sub_fields"]:
        _field_params_to_dict(sub)


def catalog_to_dict(catalog: Catalog) -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "tables": [table_to_dict(t) for t in catalog.tables],
    }


def _search_field(data: Mapping[str, Any]) -> SearchField:
    fields = dict(data)
    fields["sub_fields"] = [_search_field(s) for s in fields.get("sub_fields", ())]
    return SearchField(**fields)


def search_index_to_dict(index: SearchIndex) -> dict[str, Any]:
    data = _plain(index)
    for field in data["fields"]:
        _field_params_to_dict(field)
    return data  # type: ignore[no-any-return]


def search_index_from_dict(data: Mapping[str, Any]) -> SearchIndex:
    return SearchIndex(
        name=data["name"],
        fields=[_search_field(f) for f in data["fields"]],
        routing_fields=data.get("routing_fields", ()),
        index_sort=[IndexSorter(**o) for o in data.get("index_sort", ())],
        time_to_live=data.get("time_to_live", NO_TTL),
    )


def table_from_dict(data: Mapping[str, Any]) -> Table:
    d = dict(data)
    return Table(
        name=d["name"],
        primary_key=[
            PrimaryKeyColumn(
                name=c["name"],
                type=c["type"],
                auto_increment=c.get("auto_increment", False),
                derivation=derivation_from_dict(c["derivation"]) if c.get("derivation") else None,
            )
            for c in d["primary_key"]
        ],
        defined_columns=[DefinedColumn(**c) for c in d.get("defined_columns", ())],
        options=TableOptions(**d.get("options", {})),
        throughput=ReservedThroughput(**d.get("throughput", {})),
        secondary_indexes=[SecondaryIndex(**i) for i in d.get("secondary_indexes", ())],
        search_indexes=[search_index_from_dict(s) for s in d.get("search_indexes", ())],
        stream=StreamSpec(**d.get("stream", {})),
        attributes=[AttributeColumn(**c) for c in d.get("attributes", ())],
        access_patterns=[AccessPattern(**p) for p in d.get("access_patterns", ())],
        replaces=d.get("replaces"),
        writes=d.get("writes", "put"),
        lint_ignore=d.get("lint_ignore", {}),
    )


def catalog_from_dict(data: Mapping[str, Any]) -> Catalog:
    version = data.get("format", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise ValueError(f"unsupported catalog format {version}; this tsmigrate reads {FORMAT_VERSION}")
    return Catalog(tables=[table_from_dict(t) for t in data.get("tables", ())])


def physical_table(table: Table) -> Table:
    """Only what Tablestore itself stores and reports: what inspection of a live table gives."""
    return attrs.evolve(
        table,
        primary_key=[attrs.evolve(c, derivation=None) for c in table.primary_key],
        secondary_indexes=[attrs.evolve(i, include_base_data=True) for i in table.secondary_indexes],
        stream=table.stream if table.stream.enabled else StreamSpec(),
        attributes=(),
        access_patterns=(),
        replaces=None,
        writes="put",
        lint_ignore=(),
        source="",
    )


def physical(catalog: Catalog) -> Catalog:
    return Catalog(tables=[physical_table(t) for t in catalog.tables])
