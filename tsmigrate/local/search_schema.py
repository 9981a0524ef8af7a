"""Search-index schemas: CreateSearchIndex / UpdateSearchIndex validation and the stored form.

Rules follow tablestore-spec.md §5 (base table max_versions 1; table TTL -1 or allow_update
false; index TTL -1 or >= 86400, <= the table TTL and only with allow_update false; routing
fields are PK columns; no index_sort with NESTED; no sort_and_agg on NESTED; analyzers only on
TEXT). Where the service's message is known it is used verbatim; otherwise the message says
plainly what is wrong. Every error is 400 OTSParameterInvalid unless stated.

API (pure; the server owns persistence and locking):
    validate_create(index_name, schema, time_to_live, *, pk_names, table_ttl, max_versions,
                    allow_update) -> IndexSchemaInfo
        Validate a CreateSearchIndexRequest's name, schema and TTL against the base table.
        ``time_to_live`` is None when the request has none (-1 is then used).
    validate_ttl_update(index_name, time_to_live, *, table_ttl, allow_update) -> int
        UpdateSearchIndex: the new TTL (None when the request carries none: keep the old one).
    check_table_options(table_ttl, max_versions, allow_update, indexes) -> None
        UpdateTable on a table that has search indexes: the same preconditions.
    load_schema(index_name, schema_bytes, time_to_live, pk_names) -> IndexSchemaInfo
        Rebuild the in-memory form from what the server persisted (schema_bytes, time_to_live).
    describe_response(info, *, create_time_ms, sync_phase, current_sync_timestamp_ns,
                      include_sync_stat) -> search_pb2.DescribeSearchIndexResponse
    index_not_exist(index_name) -> OTSError            400 OTSMetaNotMatch
    delete_table_refused(table_name) -> OTSError       DeleteTable while a search index exists

Stored form (``IndexSchemaInfo.schema_bytes``): the IndexSchema exactly as received (unknown
fields, e.g. Java-only options, included), with one default filled the way the service does:
``index`` is true unless the request said otherwise. Without it the SDK's decoder, which reads
``proto.index`` unconditionally, would report ``index=False`` for a field created with the
default. An index without ``index_sort`` and without NESTED fields is presorted by the primary
key, ascending, and described so (the SDK's own tests expect that). Everything else (analyzer,
store, enable_sort_and_agg) is returned as sent, because the service's defaults for them are not
documented.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError
from tablestore.protobuf import search_pb2 as spb

from tsmigrate.local.errors import OTSError, invalid

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}\Z")
MIN_TTL = 86400
MAX_FIELDS = 1000
MAX_NESTED_DEPTH = 5
MAX_NESTED_SUB_FIELDS = 100
MAX_VECTOR_FIELDS = 5
MAX_VECTOR_DIMENSION = 4096

FIELD_TYPE_NAMES = {
    spb.LONG: "LONG", spb.DOUBLE: "DOUBLE", spb.BOOLEAN: "BOOLEAN", spb.KEYWORD: "KEYWORD",
    spb.TEXT: "TEXT", spb.NESTED: "NESTED", spb.GEO_POINT: "GEO_POINT", spb.DATE: "DATE",
    spb.VECTOR: "VECTOR", spb.JSON: "JSON",
}
ANALYZERS = ("single_word", "max_word", "min_word", "fuzzy", "split")
# Analyzers whose parameter is a protobuf message (the others take none).
_ANALYZER_PARAMETERS: dict[str, type] = {
    "single_word": spb.SingleWordAnalyzerParameter,
    "split": spb.SplitAnalyzerParameter,
    "fuzzy": spb.FuzzyAnalyzerParameter,
}


@dataclass(frozen=True)
class SearchField:
    """One indexed field, as search.py needs it."""

    name: str
    type: int  # search_pb2.FieldType
    is_array: bool
    index: bool
    sort_and_agg: bool | None  # None: not specified in the request
    store: bool | None
    analyzer: str | None
    case_sensitive: bool  # single_word parameter
    delimiter: str | None  # split parameter
    source: str  # the column the value comes from (a virtual field's source)
    virtual: bool
    sub_fields: tuple[SearchField, ...]
    date_formats: tuple[str, ...] = ()  # DATE: the patterns string values are parsed with
    vector_dimension: int = 0  # VECTOR: its dimension and metric (search_pb2.VectorMetricType)
    vector_metric: int = 0
    ngram: tuple[int, int] = (1, 7)  # fuzzy analyzer: min_chars, max_chars
    highlighting: bool = False  # enable_highlighting


@dataclass(frozen=True)
class IndexSorter:
    """An index_sort entry: a field (``field`` set) or the primary key (``field`` None)."""

    field: str | None
    descending: bool
    mode: int | None  # search_pb2.SortMode, None when unset


@dataclass(frozen=True)
class IndexSchemaInfo:
    index_name: str
    schema_bytes: bytes  # the stored IndexSchema (see the module docstring)
    time_to_live: int
    fields: dict[str, SearchField]  # in schema order
    routing_fields: tuple[str, ...]
    index_sort: tuple[IndexSorter, ...]
    pk_names: tuple[str, ...]


# --- errors ----------------------------------------------------------------------------------


def index_not_exist(index_name: str) -> OTSError:
    return OTSError(400, "OTSMetaNotMatch", f"search index [{index_name}] does not exist")


def delete_table_refused(table_name: str) -> OTSError:
    return invalid(f"Table[{table_name}] who has at least one search index cannot be deleted.")


# --- validation ------------------------------------------------------------------------------


def _check_table(max_versions: int, table_ttl: int, allow_update: bool) -> None:
    if max_versions != 1:
        raise invalid(f"The max_versions of the table must be 1 to create a search index, "
                      f"but it is {max_versions}.")
    if table_ttl != -1 and allow_update:
        raise invalid("The table must disable UpdateRow (allow_update=false) to create a search "
                      f"index when its TTL is not -1, but its TTL is {table_ttl}.")


def _check_ttl(index_name: str, ttl: int, table_ttl: int, allow_update: bool) -> None:
    if ttl != -1 and ttl < MIN_TTL:
        raise invalid(f"The time_to_live of search index [{index_name}] must be -1 or no less "
                      f"than {MIN_TTL} seconds: {ttl}.")
    if ttl != -1 and allow_update:
        raise invalid(f"The table must disable UpdateRow (allow_update=false) to set the "
                      f"time_to_live of search index [{index_name}] to {ttl}.")
    if table_ttl != -1 and (ttl == -1 or ttl > table_ttl):
        raise invalid(f"[table ttl] must be bigger than or equal search index ttl, but table ttl "
                      f"is {table_ttl} and search index ttl is [{index_name}:{ttl}]")


def validate_create(index_name: str, schema: spb.IndexSchema, time_to_live: int | None, *,
                    pk_names: Sequence[str], table_ttl: int, max_versions: int,
                    allow_update: bool) -> IndexSchemaInfo:
    if not NAME_RE.match(index_name):
        raise invalid(f"Invalid index name: '{index_name}'.")
    _check_table(max_versions, table_ttl, allow_update)
    ttl = -1 if time_to_live is None else time_to_live
    _check_ttl(index_name, ttl, table_ttl, allow_update)
    stored = spb.IndexSchema()
    stored.CopyFrom(schema)
    _fill_defaults(stored.field_schemas)
    info = _build(index_name, stored, ttl, tuple(pk_names))
    _check_schema(stored, info)
    if not stored.index_sort.sorter and not any(f.field_type == spb.NESTED for f in stored.field_schemas):
        # The service presorts by the primary key when told nothing (DescribeSearchIndex says so).
        stored.index_sort.sorter.add().pk_sort.order = spb.SORT_ORDER_ASC
        info = _build(index_name, stored, ttl, tuple(pk_names))
    return info


def validate_ttl_update(index_name: str, time_to_live: int | None, *, table_ttl: int,
                        allow_update: bool) -> int | None:
    if time_to_live is not None:
        _check_ttl(index_name, time_to_live, table_ttl, allow_update)
    return time_to_live


def check_table_options(table_ttl: int, max_versions: int, allow_update: bool,
                        indexes: Iterable[IndexSchemaInfo]) -> None:
    """UpdateTable's new options must keep every search index of the table valid."""
    indexes = list(indexes)
    if indexes:
        _check_table(max_versions, table_ttl, allow_update)
    for info in indexes:
        _check_ttl(info.index_name, info.time_to_live, table_ttl, allow_update)


def _fill_defaults(fields: Iterable[spb.FieldSchema]) -> None:
    for field in fields:
        if not field.HasField("index"):
            field.index = True
        _fill_defaults(field.field_schemas)


def _check_fields(fields: Sequence[spb.FieldSchema], depth: int, where: str) -> int:
    """Checks one level of fields; returns the number of VECTOR fields below it."""
    seen: set[str] = set()
    vectors = 0
    for field in fields:
        name = field.field_name
        if not name:
            raise invalid(f"Field name is missing{where}.")
        if name in seen:
            raise invalid(f"Duplicated field name: '{name}'{where}.")
        seen.add(name)
        if not field.HasField("field_type") or field.field_type not in FIELD_TYPE_NAMES:
            raise invalid(f"Unknown field type of field [{name}].")
        ftype = field.field_type
        if field.HasField("analyzer"):
            _check_analyzer(field)
        if field.date_formats and ftype != spb.DATE:
            raise invalid(f"Only DATE fields take date_formats: field [{name}].")
        if field.is_virtual_field and not field.source_field_names:
            raise invalid(f"Virtual field [{name}] needs a source field.")
        if ftype == spb.NESTED:
            if field.enable_sort_and_agg:
                raise invalid(f"Nested field [{name}] does not support enable_sort_and_agg.")
            if not field.field_schemas:
                raise invalid(f"Nested field [{name}] needs sub-field schemas.")
            if len(field.field_schemas) > MAX_NESTED_SUB_FIELDS:
                raise invalid(f"Nested field [{name}] has more than {MAX_NESTED_SUB_FIELDS} "
                              "sub-fields.")
            if depth >= MAX_NESTED_DEPTH:
                raise invalid(f"Nested field [{name}] exceeds {MAX_NESTED_DEPTH} nested levels.")
            vectors += _check_fields(field.field_schemas, depth + 1, f" in nested field [{name}]")
        elif field.field_schemas:
            raise invalid(f"Only NESTED fields have sub-field schemas: field [{name}].")
        if ftype == spb.VECTOR:
            vectors += 1
            dim = field.vector_options.dimension
            if not 1 <= dim <= MAX_VECTOR_DIMENSION:
                raise invalid(f"The dimension of vector field [{name}] must be in range "
                              f"[1, {MAX_VECTOR_DIMENSION}]: {dim}.")
        elif field.HasField("vector_options"):
            raise invalid(f"Only VECTOR fields take vector_options: field [{name}].")
    return vectors


def _check_analyzer(field: spb.FieldSchema) -> None:
    name = field.field_name
    if field.field_type != spb.TEXT:
        raise invalid(f"Analyzer is only supported by TEXT fields: field [{name}] is "
                      f"{FIELD_TYPE_NAMES[field.field_type]}.")
    if field.analyzer not in ANALYZERS:
        raise invalid(f"Unknown analyzer [{field.analyzer}] of field [{name}].")
    if field.analyzer_parameter:
        message = _ANALYZER_PARAMETERS.get(field.analyzer)
        if message is None:
            raise invalid(f"Analyzer [{field.analyzer}] of field [{name}] takes no parameter.")
        try:
            message().ParseFromString(field.analyzer_parameter)
        except DecodeError:
            raise invalid(f"Invalid analyzer_parameter of field [{name}].") from None


def _check_schema(schema: spb.IndexSchema, info: IndexSchemaInfo) -> None:
    fields = schema.field_schemas
    if not fields:
        raise invalid("The search index schema has no field.")
    if len(fields) > MAX_FIELDS:
        raise invalid(f"The number of fields exceeds the limit of {MAX_FIELDS}.")
    if _check_fields(fields, 1, "") > MAX_VECTOR_FIELDS:
        raise invalid(f"The number of VECTOR fields exceeds the limit of {MAX_VECTOR_FIELDS}.")
    for field in info.fields.values():
        if field.virtual:
            source = info.fields.get(field.source)
            if source is None and field.source not in info.pk_names:
                raise invalid(f"Source field [{field.source}] of virtual field [{field.name}] "
                              "does not exist.")
    routing = info.routing_fields
    if len(set(routing)) != len(routing):
        raise invalid("Duplicated routing field.")
    for name in routing:
        if name not in info.pk_names:
            raise invalid(f"Routing field [{name}] must be a primary key column.")
    if schema.HasField("index_sort") and schema.index_sort.sorter:
        if any(f.type == spb.NESTED for f in info.fields.values()):
            raise invalid("Index sort is not supported by an index that has NESTED fields.")
        for proto, sorter in zip(schema.index_sort.sorter, info.index_sort, strict=True):
            if not (proto.HasField("field_sort") or proto.HasField("pk_sort")):
                raise invalid("Index sort supports only PrimaryKeySort and FieldSort.")
            if sorter.field is not None:
                field = info.fields.get(sorter.field)
                if field is None:
                    raise invalid(f"Index sort field [{sorter.field}] is not in the schema.")
                if field.sort_and_agg is False or field.type == spb.TEXT:
                    raise invalid(f"Index sort field [{sorter.field}] must enable "
                                  "enable_sort_and_agg.")


# --- building the in-memory form -------------------------------------------------------------


def _field(proto: spb.FieldSchema) -> SearchField:
    case_sensitive = False
    delimiter = None
    if proto.analyzer_parameter and proto.analyzer == "single_word":
        param = spb.SingleWordAnalyzerParameter()
        param.ParseFromString(proto.analyzer_parameter)
        case_sensitive = param.case_sensitive
    elif proto.analyzer_parameter and proto.analyzer == "split":
        split = spb.SplitAnalyzerParameter()
        split.ParseFromString(proto.analyzer_parameter)
        delimiter = split.delimiter or None
    ngram = (1, 7)
    if proto.analyzer_parameter and proto.analyzer == "fuzzy":
        fuzzy = spb.FuzzyAnalyzerParameter()
        fuzzy.ParseFromString(proto.analyzer_parameter)
        ngram = (fuzzy.min_chars if fuzzy.HasField("min_chars") else 1,
                 fuzzy.max_chars if fuzzy.HasField("max_chars") else 7)
    virtual = proto.is_virtual_field
    return SearchField(
        name=proto.field_name,
        type=proto.field_type,
        is_array=proto.is_array,
        index=proto.index if proto.HasField("index") else True,
        sort_and_agg=proto.enable_sort_and_agg if proto.HasField("enable_sort_and_agg") else None,
        store=proto.store if proto.HasField("store") else None,
        analyzer=proto.analyzer if proto.HasField("analyzer") else None,
        case_sensitive=case_sensitive,
        delimiter=delimiter,
        source=proto.source_field_names[0] if virtual and proto.source_field_names
        else proto.field_name,
        virtual=virtual,
        sub_fields=tuple(_field(f) for f in proto.field_schemas),
        date_formats=tuple(proto.date_formats),
        ngram=ngram,
        highlighting=proto.enable_highlighting,
        vector_dimension=proto.vector_options.dimension,
        vector_metric=proto.vector_options.metric_type,
    )


def _build(index_name: str, schema: spb.IndexSchema, ttl: int,
           pk_names: tuple[str, ...]) -> IndexSchemaInfo:
    fields: dict[str, SearchField] = {}
    for proto in schema.field_schemas:
        try:
            fields.setdefault(proto.field_name, _field(proto))
        except DecodeError:
            raise invalid(f"Invalid analyzer_parameter of field [{proto.field_name}].") from None
    sorters = []
    for sorter in schema.index_sort.sorter:
        if sorter.HasField("field_sort"):
            fs = sorter.field_sort
            sorters.append(IndexSorter(fs.field_name, fs.order == spb.SORT_ORDER_DESC,
                                       fs.mode if fs.HasField("mode") else None))
        else:
            sorters.append(IndexSorter(None, sorter.pk_sort.order == spb.SORT_ORDER_DESC, None))
    return IndexSchemaInfo(
        index_name=index_name,
        schema_bytes=schema.SerializeToString(),
        time_to_live=ttl,
        fields=fields,
        routing_fields=tuple(schema.index_setting.routing_fields),
        index_sort=tuple(sorters),
        pk_names=pk_names,
    )


def load_schema(index_name: str, schema_bytes: bytes, time_to_live: int,
                pk_names: Sequence[str]) -> IndexSchemaInfo:
    schema = spb.IndexSchema()
    schema.ParseFromString(schema_bytes)
    return _build(index_name, schema, time_to_live, tuple(pk_names))


def describe_response(info: IndexSchemaInfo, *, create_time_ms: int, sync_phase: int,
                      current_sync_timestamp_ns: int,
                      include_sync_stat: bool = True) -> spb.DescribeSearchIndexResponse:
    """``sync_phase`` is the wire value (search_pb2.FULL / INCR); the SDK remaps it to 0 / 1."""
    response = spb.DescribeSearchIndexResponse()
    response.schema.ParseFromString(info.schema_bytes)
    if include_sync_stat:
        response.sync_stat.sync_phase = sync_phase
        response.sync_stat.current_sync_timestamp = current_sync_timestamp_ns
    response.create_time = create_time_ms
    response.time_to_live = info.time_to_live
    return response
