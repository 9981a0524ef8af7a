"""Validation of a Catalog against Tablestore's documented schema rules.

Every rule of the service's limits for names, primary keys, auto-increment columns, defined
columns, table options, secondary indexes, search indexes and streams is checked here (see
``shared/reference/tablestore-spec.md`` sections 1 to 5). Problems are collected, never raised one
by one: ``check_catalog`` raises a single ``SchemaError`` listing all of them.

Rule names are stable identifiers (``primary-key.count``); tests and docs refer to them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

from tsmigrate.errors import Problem, SchemaError
from tsmigrate.keys import Concat
from tsmigrate.schema import (
    ANALYZERS,
    ASC,
    BINARY,
    BOOLEAN,
    DEFINED_COLUMN_TYPES,
    DESC,
    DOUBLE,
    INDEX_TYPES,
    INTEGER,
    LOCAL,
    NO_TTL,
    PRIMARY_KEY_TYPES,
    SEARCH_FIELD_TYPES,
    STRING,
    Catalog,
    SearchField,
    SearchIndex,
    SecondaryIndex,
    Table,
)
from tsmigrate.schema.render import duration

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
MAX_TABLES_PER_INSTANCE = 64  # data tables and index tables together
MAX_PRIMARY_KEY_COLUMNS = 4
MAX_DEFINED_COLUMNS = 32
MAX_SECONDARY_INDEXES = 5
MAX_INDEX_KEY_COLUMNS = 4
MAX_INDEX_INCLUDED_COLUMNS = 32
MIN_TTL = 86400
INT32_MAX = 2**31 - 1
MAX_TIME_DEVIATION = (2**63 - 1) // 1_000_000
MAX_RESERVED_CU = 100_000
MAX_SEARCH_FIELDS = 1000
MAX_NESTED_SUB_FIELDS = 100
MAX_VECTOR_FIELDS = 5
MAX_VECTOR_DIMENSION = 4096
MAX_STREAM_HOURS = 168
VECTOR_METRICS = ("euclidean", "cosine", "dot_product")

# Which table column types a search field type can index.
SEARCH_SOURCE_TYPES: dict[str, tuple[str, ...]] = {
    "LONG": (INTEGER,),
    "DOUBLE": (DOUBLE,),
    "BOOLEAN": (BOOLEAN,),
    "KEYWORD": (STRING,),
    "TEXT": (STRING,),
    "NESTED": (STRING,),
    "GEO_POINT": (STRING,),
    "DATE": (INTEGER, STRING),
    "VECTOR": (STRING,),
    "JSON": (STRING,),
}
INDEX_KEY_TYPES = (STRING, INTEGER, BINARY)


def _seconds(value: int) -> str:
    """An invalid duration as plans print durations (``3h``), a negative one in seconds."""
    return duration(value) if value > 0 else f"{value}s"


def check_catalog(catalog: Catalog) -> None:
    """Raise one SchemaError listing every problem of the catalog, or return quietly."""
    problems = validate_catalog(catalog)
    if problems:
        raise SchemaError(problems)


def validate_catalog(catalog: Catalog) -> list[Problem]:
    problems: list[Problem] = []
    for table in catalog.tables:
        problems.extend(validate_table(table))
    problems.extend(_instance_rules(catalog))
    return problems


def validate_table(table: Table) -> list[Problem]:
    report = _Report(table)
    _names(table, report)
    _primary_key(table, report)
    _defined_columns(table, report)
    _options(table, report)
    _secondary_indexes(table, report)
    _search_indexes(table, report)
    _stream(table, report)
    return report.problems


class _Report:
    def __init__(self, table: Table):
        self.table = table
        self.problems: list[Problem] = []

    def has(self, field: str, rule: str) -> bool:
        return any(p.field == field and p.rule == rule for p in self.problems)

    def add(self, field: str, rule: str, message: str, fix: str = "") -> None:
        self.problems.append(
            Problem(
                table=self.table.name,
                field=field,
                rule=rule,
                message=message,
                fix=fix,
                model=self.table.source,
            )
        )


def _name_ok(name: str) -> bool:
    return isinstance(name, str) and bool(NAME_RE.match(name))


NAME_FIX = "use 1 to 255 ASCII letters, digits or '_', starting with a letter or '_'"


def _names(table: Table, report: _Report) -> None:
    if not _name_ok(table.name):
        report.add("table", "name.table", f"invalid table name {table.name!r}", NAME_FIX)
    for column in (*table.primary_key, *table.defined_columns, *table.attributes):
        if not _name_ok(column.name):
            report.add(column.name, "name.column", f"invalid column name {column.name!r}", NAME_FIX)
    if table.replaces is not None:
        if not _name_ok(table.replaces):
            report.add("replaces", "name.table", f"invalid table name {table.replaces!r}", NAME_FIX)
        elif table.replaces == table.name:
            report.add(
                "replaces",
                "replaces.self",
                "a table cannot replace itself",
                "give the new table a new physical name and set replaces= to the old one",
            )


def _primary_key(table: Table, report: _Report) -> None:
    pk = table.primary_key
    if not 1 <= len(pk) <= MAX_PRIMARY_KEY_COLUMNS:
        report.add(
            "primary_key",
            "primary-key.count",
            f"the primary key has {len(pk)} columns; it must have 1 to 4",
            "declare between one and four PrimaryKey columns",
        )
    for name, count in Counter(c.name for c in pk).items():
        if count > 1:
            report.add(name, "primary-key.duplicate", f"primary-key column {name!r} is declared twice")
    for column in pk:
        if column.type not in PRIMARY_KEY_TYPES:
            report.add(
                column.name,
                "primary-key.type",
                f"{column.type} is an invalid type for the primary key",
                "use str (STRING), int (INTEGER) or bytes (BINARY)",
            )
    auto = [c for c in pk if c.auto_increment]
    if len(auto) > 1:
        report.add(
            ", ".join(c.name for c in auto),
            "auto-increment.count",
            f"{len(auto)} auto-increment columns; a table may have at most one",
            "keep auto_increment=True on a single column",
        )
    for column in auto:
        if column.type != INTEGER:
            report.add(
                column.name,
                "auto-increment.type",
                "an auto-increment primary-key column must be INTEGER",
                "declare it PrimaryKey(int, auto_increment=True)",
            )
        if pk and column is pk[0]:
            report.add(
                column.name,
                "auto-increment.partition-key",
                "the first primary-key column (the partition key) cannot be auto-increment",
                "put a partition key first and the auto-increment column after it",
            )
        if column.derivation is not None:
            report.add(
                column.name,
                "auto-increment.derived",
                "an auto-increment column is generated by the service and cannot be derived",
                "drop derive= or auto_increment=True",
            )
    known = {c.name for c in (*pk, *table.defined_columns, *table.attributes)}
    for column in pk:
        derivation = column.derivation
        if derivation is None:
            continue
        ordering = derivation.order_problems() if isinstance(derivation, Concat) else []
        for message in derivation.problems():
            rule = "key-derivation.order" if message in ordering else "key-derivation.invalid"
            report.add(column.name, rule, message)
        if column.type != derivation.output_type:
            report.add(
                column.name,
                "key-derivation.type",
                f"{type(derivation).__name__} produces {derivation.output_type} values but the "
                f"column is {column.type}",
                f"declare the column as {derivation.output_type}",
            )
        for source in derivation.sources:
            if source == column.name:
                report.add(
                    column.name,
                    "key-derivation.source",
                    "a key column cannot be derived from itself",
                    "derive it from another declared column",
                )
            elif source not in known:
                report.add(
                    column.name,
                    "key-derivation.source",
                    f"derivation reads {source!r}, which the model does not declare",
                    f"declare {source!r} as a Column of the model",
                )


def _defined_columns(table: Table, report: _Report) -> None:
    defined = table.defined_columns
    if len(defined) > MAX_DEFINED_COLUMNS:
        report.add(
            "defined_columns",
            "defined-column.count",
            f"{len(defined)} defined columns; a table may have at most 32",
            "keep only the columns that indexes need as defined=True",
        )
    pk_names = set(table.primary_key_names)
    for name, count in Counter(c.name for c in (*defined, *table.attributes)).items():
        if count > 1:
            report.add(name, "column.duplicate", f"column {name!r} is declared twice")
    for column in (*defined, *table.attributes):
        if column.name in pk_names:
            report.add(
                column.name,
                "column.clashes-with-primary-key",
                f"attribute column {column.name!r} has the name of a primary-key column",
                "rename the attribute column",
            )
        if column.type not in DEFINED_COLUMN_TYPES:
            report.add(
                column.name,
                "column.type",
                f"{column.type} is an invalid attribute column type",
                "use str, int, float, bool or bytes",
            )


def _options(table: Table, report: _Report) -> None:
    options = table.options
    ttl = options.time_to_live
    if ttl != NO_TTL and not MIN_TTL <= ttl <= INT32_MAX:
        report.add(
            "ttl",
            "options.ttl",
            f"time to live {_seconds(ttl)} is invalid; it must be forever or at least 1d (the "
            "service's minimum)",
            "use ttl=None for no expiry, or ttl of one day or more (e.g. '90d')",
        )
    if not 1 <= options.max_versions <= INT32_MAX:
        report.add(
            "max_versions",
            "options.max-versions",
            f"max versions {options.max_versions} is invalid; it must be at least 1",
        )
    if not 0 <= options.max_time_deviation <= MAX_TIME_DEVIATION:
        report.add(
            "max_time_deviation",
            "options.max-time-deviation",
            f"max time deviation {_seconds(options.max_time_deviation)} must be in "
            "[0s, INT64_MAX/1000000 s]",
        )
    for side in ("read", "write"):
        value = getattr(table.throughput, side)
        if not 0 <= value <= MAX_RESERVED_CU:
            report.add(
                f"reserved_{side}",
                "throughput.range",
                f"reserved {side} capacity {value} must be between 0 and 100000 CU",
            )


def _index_prerequisites(table: Table, report: _Report, field: str, kind: str) -> None:
    options = table.options
    if options.max_versions != 1:
        report.add(
            field,
            f"{kind}.max-versions",
            f"a table with a {kind.replace('-', ' ')} must keep one version; "
            f"max_versions is {options.max_versions}",
            "set max_versions=1 on the table",
        )
    if options.time_to_live != NO_TTL and options.allow_update:
        report.add(
            field,
            f"{kind}.ttl-allow-update",
            f"a table with a {kind.replace('-', ' ')} and a TTL must not allow updates "
            "(allow_update must be False), so the index expires with the table",
            "set allow_update=False on the table, or remove its TTL",
        )


def _secondary_indexes(table: Table, report: _Report) -> None:
    indexes = table.secondary_indexes
    if not indexes:
        return
    if len(indexes) > MAX_SECONDARY_INDEXES:
        report.add(
            "indexes",
            "secondary-index.count",
            f"{len(indexes)} secondary indexes; a table may have at most 5",
            "merge indexes or use a search index for the extra queries",
        )
    _index_prerequisites(table, report, f"index {indexes[0].name}", "secondary-index")
    for index in indexes:
        _secondary_index(table, index, report)


def _secondary_index(table: Table, index: SecondaryIndex, report: _Report) -> None:
    field = f"index {index.name}"
    pk_names = table.primary_key_names
    defined = {c.name: c.type for c in table.defined_columns}
    if not _name_ok(index.name):
        report.add(field, "name.index", f"invalid index name {index.name!r}", NAME_FIX)
    if index.type not in INDEX_TYPES:
        report.add(field, "secondary-index.type", f"unknown index type {index.type!r}")
    if not 1 <= len(index.keys) <= MAX_INDEX_KEY_COLUMNS:
        report.add(
            field,
            "secondary-index.key-count",
            f"the index has {len(index.keys)} key columns; it must have 1 to 4",
        )
    for name, count in Counter(index.keys).items():
        if count > 1:
            report.add(field, "secondary-index.duplicate", f"key column {name!r} is listed twice")
    for key in index.keys:
        if key in pk_names:
            continue
        if key not in defined:
            hint = (
                f"declare {key!r} with Column(..., defined=True)"
                if table.column_type(key)
                else f"declare a defined column {key!r} or fix the name"
            )
            report.add(
                field,
                "secondary-index.unknown-column",
                f"index key {key!r} is neither a primary-key column nor a defined column",
                hint,
            )
        elif defined[key] not in INDEX_KEY_TYPES:
            report.add(
                field,
                "secondary-index.key-type",
                f"index key {key!r} is {defined[key]}; index keys must be STRING, INTEGER or BINARY",
                "include the column instead of using it as a key",
            )
    if len(index.include) > MAX_INDEX_INCLUDED_COLUMNS:
        report.add(
            field,
            "secondary-index.include-count",
            f"{len(index.include)} included columns; an index may include at most 32",
        )
    for name in index.include:
        if name in index.keys or name in pk_names:
            report.add(
                field,
                "secondary-index.include-key",
                f"included column {name!r} is already part of the index key",
                f"remove {name!r} from include",
            )
        elif name not in defined:
            report.add(
                field,
                "secondary-index.unknown-column",
                f"included column {name!r} is not a defined column",
                f"declare {name!r} with Column(..., defined=True)",
            )
    if index.keys and table.primary_key:
        first = table.primary_key[0]
        if index.type == LOCAL and index.keys[0] != first.name:
            report.add(
                field,
                "secondary-index.local-partition-key",
                f"a local index must start with the partition key {first.name!r}, "
                f"not {index.keys[0]!r}",
                f"use keys=[{first.name!r}, ...] or make it a GlobalIndex",
            )
        auto = next((c for c in table.primary_key if c.auto_increment), None)
        if auto is not None and index.keys[0] == auto.name:
            report.add(
                field,
                "secondary-index.auto-increment",
                f"the first index key cannot be the auto-increment column {auto.name!r}",
            )


def _search_indexes(table: Table, report: _Report) -> None:
    indexes = table.search_indexes
    if not indexes:
        return
    _index_prerequisites(table, report, f"search index {indexes[0].name}", "search-index")
    for name, count in Counter(i.name for i in indexes).items():
        if count > 1:
            report.add(f"search index {name}", "search-index.duplicate", "declared twice")
    for index in indexes:
        _search_index(table, index, report)


def _walk(fields: tuple[SearchField, ...], depth: int = 1) -> Iterator[tuple[SearchField, int]]:
    for field in fields:
        yield field, depth
        yield from _walk(field.sub_fields, depth + 1)


def _search_index(table: Table, index: SearchIndex, report: _Report) -> None:
    where = f"search index {index.name}"
    if not _name_ok(index.name):
        report.add(where, "name.search-index", f"invalid search index name {index.name!r}", NAME_FIX)
    if index.name == table.name:
        report.add(where, "name.search-index", "a search index cannot have the table's name")
    if not index.fields:
        report.add(where, "search-index.no-fields", "a search index needs at least one field")
    if len(index.fields) > MAX_SEARCH_FIELDS:
        report.add(where, "search-index.field-count", f"{len(index.fields)} fields; at most 1000")
    for name, count in Counter(f.name for f in index.fields).items():
        if count > 1:
            report.add(f"{where}.{name}", "search-index.duplicate-field", "field listed twice")
    for field in index.fields:
        column_type = table.column_type(field.name)
        if column_type is None:
            report.add(
                f"{where}.{field.name}",
                "search-index.unknown-column",
                f"field {field.name!r} is not a column of the table",
                f"declare a Column {field.name!r} on the model or fix the name",
            )
        elif field.type in SEARCH_SOURCE_TYPES:
            allowed = (STRING,) if field.is_array else SEARCH_SOURCE_TYPES[field.type]
            if column_type not in allowed:
                report.add(
                    f"{where}.{field.name}",
                    "search-index.field-column-type",
                    f"a {field.type}{' array' if field.is_array else ''} field cannot index a "
                    f"{column_type} column (it needs {' or '.join(allowed)})",
                    "array fields index a STRING column holding a JSON array"
                    if field.is_array
                    else "pick the search type that matches the column",
                )
    vectors = 0
    for field, depth in _walk(index.fields):
        fwhere = f"{where}.{field.name}"
        if field.type not in SEARCH_FIELD_TYPES:
            report.add(
                fwhere,
                "search-index.field-type",
                f"unknown search field type {field.type!r}",
                f"use one of {', '.join(t.lower() for t in SEARCH_FIELD_TYPES)}",
            )
        if field.analyzer is not None:
            if field.type != "TEXT":
                report.add(fwhere, "search-index.analyzer", "only TEXT fields take an analyzer")
            elif field.analyzer not in ANALYZERS:
                report.add(
                    fwhere,
                    "search-index.analyzer",
                    f"unknown analyzer {field.analyzer!r}",
                    f"use one of {', '.join(ANALYZERS)}",
                )
        if field.type == "NESTED":
            if not field.sub_fields:
                report.add(fwhere, "search-index.nested", "a NESTED field needs sub-fields")
            if field.sort_and_agg:
                report.add(
                    fwhere, "search-index.nested", "a NESTED field cannot enable sort and aggregation"
                )
            if len(field.sub_fields) > MAX_NESTED_SUB_FIELDS:
                report.add(fwhere, "search-index.nested", "a NESTED field has over 100 sub-fields")
            if depth > 5:
                report.add(fwhere, "search-index.nested", "NESTED fields nest at most 5 levels")
        elif field.sub_fields:
            report.add(fwhere, "search-index.nested", "only NESTED fields have sub-fields")
        if field.type == "TEXT" and field.sort_and_agg:
            report.add(
                fwhere,
                "search-index.text-sort",
                "TEXT fields cannot be sorted or aggregated",
                "add a KEYWORD field for sorting",
            )
        if field.type == "VECTOR":
            vectors += 1
            if not field.vector_dimension or not 1 <= field.vector_dimension <= MAX_VECTOR_DIMENSION:
                report.add(fwhere, "search-index.vector", "a VECTOR field needs a dimension 1..4096")
            if field.vector_metric not in VECTOR_METRICS:
                report.add(
                    fwhere,
                    "search-index.vector",
                    f"a VECTOR field needs a metric: {', '.join(VECTOR_METRICS)}",
                )
        if field.date_formats and field.type != "DATE":
            report.add(fwhere, "search-index.date-format", "only DATE fields take date formats")
    if vectors > MAX_VECTOR_FIELDS:
        report.add(where, "search-index.vector", f"{vectors} VECTOR fields; at most 5")
    pk_names = table.primary_key_names
    for name in index.routing_fields:
        if name not in pk_names:
            report.add(
                where,
                "search-index.routing",
                f"routing field {name!r} is not a primary-key column",
                f"route by primary-key columns only: {', '.join(pk_names)}",
            )
    has_nested = any(f.type == "NESTED" for f in index.fields)
    sortable = {f.name for f in index.fields if f.sort_and_agg}
    for sorter in index.index_sort:
        if sorter.mode not in (None, "MIN", "MAX", "AVG"):
            report.add(where, "search-index.sort", f"sort mode must be min, max or avg, not {sorter.mode}")
        if sorter.order not in (ASC, DESC):
            report.add(where, "search-index.sort", f"sort order must be ASC or DESC, not {sorter.order}")
        if sorter.field is not None and sorter.field not in sortable:
            report.add(
                where,
                "search-index.sort",
                f"index sort on {sorter.field!r} needs that field with sort enabled",
                f"declare SearchField({sorter.field!r}, ..., sort=True)",
            )
    if has_nested and index.index_sort:
        report.add(
            where,
            "search-index.sort",
            "an index with NESTED fields cannot be presorted",
            "remove the index sort",
        )
    ttl = index.time_to_live
    if ttl != NO_TTL:
        if not MIN_TTL <= ttl <= INT32_MAX:
            report.add(
                where,
                "search-index.ttl",
                f"search index TTL {_seconds(ttl)} is invalid; it must be forever or at least 1d",
            )
        table_ttl = table.options.time_to_live
        if table_ttl != NO_TTL and ttl > table_ttl:
            report.add(
                where,
                "search-index.ttl-above-table",
                f"search index TTL {duration(ttl)} is above the table's TTL {duration(table_ttl)}",
                "make the index TTL at most the table's",
            )
        # One finding an index: the table's TTL may have reported it on this one already.
        if table.options.allow_update and not report.has(where, "search-index.ttl-allow-update"):
            report.add(
                where,
                "search-index.ttl-allow-update",
                "a search index with a TTL requires allow_update=False on the table",
                "set allow_update=False on the table or drop the index TTL",
            )
    elif table.options.time_to_live != NO_TTL:
        report.add(
            where,
            "search-index.ttl-above-table",
            f"search index keeps data forever but the table expires it after "
            f"{duration(table.options.time_to_live)}",
            "give the search index a TTL no longer than the table's",
        )


def _stream(table: Table, report: _Report) -> None:
    stream = table.stream
    if stream.enabled and not 1 <= stream.expiration_hours <= MAX_STREAM_HOURS:
        report.add(
            "stream",
            "stream.expiration",
            f"stream expiration {stream.expiration_hours} h must be 1 to 168 hours",
        )


def _instance_rules(catalog: Catalog) -> list[Problem]:
    problems: list[Problem] = []
    # name -> every (description, owning table, field) that uses it
    owners: dict[str, list[tuple[str, Table, str]]] = {}
    for table in catalog.tables:
        model = f"model {table.source}" if table.source else f"table {table.name!r}"
        owners.setdefault(table.name, []).append((model, table, "table"))
        for index in table.secondary_indexes:
            owners.setdefault(index.name, []).append(
                (f"index {index.name!r} of {model}", table, f"index {index.name}")
            )
    for name, users in owners.items():
        if len(users) > 1:
            # Reported once, on the last declaration to take the name (an index, if any).
            _, table, field = users[-1]
            problems.append(
                Problem(
                    table=table.name,
                    field=field,
                    rule="name.instance-unique",
                    message=f"name {name!r} is used by {' and '.join(u[0] for u in users)}; "
                    "tables and secondary indexes share one namespace in an instance",
                    fix="give the index an explicit, unique name="
                    if field != "table"
                    else "give one of the models another table=",
                    model=table.source,
                )
            )
    problems.extend(_replaces_rules(catalog))
    count, beyond = 0, []
    for table in catalog.tables:
        count += 1 + len(table.secondary_indexes)
        if count > MAX_TABLES_PER_INSTANCE:
            beyond.append(table)
    if beyond:
        names = ", ".join(t.name for t in beyond)
        problems.append(
            Problem(
                table=beyond[0].name,
                field="table",
                rule="instance.table-quota",
                message=f"the models declare {count} tables and index tables; an instance holds "
                f"at most {MAX_TABLES_PER_INSTANCE}, so table(s) {names} cannot be created",
                fix="split the models across instances or drop unused indexes",
                model=beyond[0].source,
            )
        )
    return problems


def _replaces_rules(catalog: Catalog) -> list[Problem]:
    """``replaces=`` names a table the models no longer declare: a rewrite copies it into the new
    table and ``rewrite finish --allow-destructive`` drops it, so a table still declared (by
    another model, or replacing this one back: a cycle) would be dropped under its model, or
    rewritten back and forth by every apply."""
    problems: list[Problem] = []
    declared = {table.name: table for table in catalog.tables}
    in_cycle: set[str] = set()
    for table in catalog.tables:
        if table.replaces == table.name:
            continue  # replaces.self
        path, name = [table.name], table.replaces
        while name in declared and name not in path and declared[name].replaces is not None:
            path.append(name)
            name = declared[name].replaces
        if name == table.name and table.name not in in_cycle:
            in_cycle.update(path)
            problems.append(Problem(
                table=table.name, field="replaces", rule="replaces.cycle",
                message=f"the tables replace each other in a cycle: {path[0]} replaces "
                f"{', which replaces '.join([*path[1:], table.name])}; every apply would rewrite one "
                "into the other",
                fix="keep replaces= on the new table only, and remove the old table's model",
                model=table.source,
            ))
    for table in catalog.tables:
        other = declared.get(table.replaces or "")
        if other is None or table.name in in_cycle or other is table:
            continue
        problems.append(Problem(
            table=table.name, field="replaces", rule="replaces.declared",
            message=f"replaces {other.name!r}, which "
            + (f"model {other.source}" if other.source else "another model")
            + " still declares: finishing the rewrite would drop a declared table",
            fix=f"remove the model of {other.name!r} (services move to this one), or drop replaces=",
            model=table.source,
        ))
    return problems
