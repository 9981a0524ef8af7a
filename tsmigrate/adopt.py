"""Adoption: write model source for tables that already exist, so a live instance can be brought
under tsmigrate without retyping its schema. The source compiles back to the same schema."""

from __future__ import annotations

import keyword
import re
from pathlib import Path

import jinja2

from tsmigrate.errors import ConfigError
from tsmigrate.model import RESERVED_NAMES
from tsmigrate.render import duration
from tsmigrate.schema import LOCAL, NO_TTL, Catalog, IndexSorter, SearchField, Table

_PY_TYPES = {"STRING": "str", "INTEGER": "int", "BINARY": "bytes", "DOUBLE": "float", "BOOLEAN": "bool"}

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("tsmigrate", "templates"),
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    undefined=jinja2.StrictUndefined,
)


def _attribute(name: str, taken: set[str]) -> tuple[str, str]:
    """A Python attribute for a column or index name, and the ``name=`` argument when they differ."""
    attr = name
    if keyword.iskeyword(attr) or attr in RESERVED_NAMES or attr.startswith("__"):
        attr = f"{attr.strip('_')}_col" if attr.strip("_") else "col"
    if attr[0].isdigit():  # "__3" stripped: an identifier cannot start with a digit
        attr = f"col_{attr}"
    while attr in taken:
        attr += "_"
    taken.add(attr)
    return attr, "" if attr == name else f", name={name!r}"


def class_name(table: str) -> str:
    words = [w for w in re.split(r"_+", table) if w]
    name = "".join(w[:1].upper() + w[1:] for w in words) or "Table"
    if keyword.iskeyword(name):  # table "_False" -> class False: not a valid class name
        return f"{name}Table"
    return name if name[0].isalpha() else f"T{name}"


def _search_field(field: SearchField) -> str:
    args = [repr(field.name), repr(field.type.lower())]
    if not field.index:
        args.append("index=False")
    for flag, keyword_ in (("sort_and_agg", "sort"), ("store", "store"), ("is_array", "array")):
        if getattr(field, flag):
            args.append(f"{keyword_}=True")
    if field.analyzer:
        args.append(f"analyzer={field.analyzer!r}")
    if field.analyzer_parameters:
        args.append(f"analyzer_parameters={dict(field.analyzer_parameters)!r}")
    if field.sub_fields:
        args.append("fields=[" + ", ".join(_search_field(f) for f in field.sub_fields) + "]")
    if field.date_formats:
        args.append(f"date_formats={list(field.date_formats)!r}")
    if field.vector_dimension is not None:
        args.append(f"dimension={field.vector_dimension}")
    if field.vector_metric is not None:
        args.append(f"metric={field.vector_metric!r}")
    return f"SearchField({', '.join(args)})"


def _presort(sorter: IndexSorter) -> str:
    mode = f":{sorter.mode.lower()}" if sorter.mode else ""
    return ("-" if sorter.order == "DESC" else "") + (sorter.field or "pk") + mode


def _ttl(seconds: int) -> str:
    return "None" if seconds == NO_TTL else repr(duration(seconds))


def table_source(table: Table) -> str:
    o = table.options
    options = [f"table={table.name!r}"]
    if o.time_to_live != NO_TTL:
        options.append(f"ttl={_ttl(o.time_to_live)}")
    if o.max_versions != 1:
        options.append(f"max_versions={o.max_versions}")
    if o.max_time_deviation != 86400:
        options.append(f"max_time_deviation={o.max_time_deviation}")
    if not o.allow_update:
        options.append("allow_update=False")
    if table.throughput.read:
        options.append(f"reserved_read={table.throughput.read}")
    if table.throughput.write:
        options.append(f"reserved_write={table.throughput.write}")
    if table.stream.enabled:
        options.append(f"stream='{table.stream.expiration_hours}h'")

    imports = {"Model", "PrimaryKey"}
    taken: set[str] = set()
    body: list[str] = []
    for column in table.primary_key:
        attr, name = _attribute(column.name, taken)
        auto = ", auto_increment=True" if column.auto_increment else ""
        body.append(f"{attr} = PrimaryKey({_PY_TYPES[column.type]}{auto}{name})")
    if table.defined_columns:
        imports.add("Column")
        body.append("")
    for column in table.defined_columns:
        attr, name = _attribute(column.name, taken)
        body.append(f"{attr} = Column({_PY_TYPES[column.type]}, defined=True{name})")
    if table.secondary_indexes:
        body.append("")
    for index in table.secondary_indexes:
        kind = "LocalIndex" if index.type == LOCAL else "GlobalIndex"
        imports.add(kind)
        attr, name = _attribute(index.name, taken)
        include = f", include={list(index.include)!r}" if index.include else ""
        body.append(f"{attr} = {kind}(keys={list(index.keys)!r}{include}{name})")
    for search in table.search_indexes:
        imports |= {"SearchIndex", "SearchField"}
        attr, name = _attribute(search.name, taken)
        args = ["fields=[" + ", ".join(_search_field(f) for f in search.fields) + "]"]
        if search.routing_fields:
            args.append(f"routing={list(search.routing_fields)!r}")
        if search.index_sort:
            args.append("presort=" + repr([_presort(s) for s in search.index_sort]))
        if search.time_to_live != o.time_to_live:
            args.append(f"ttl={_ttl(search.time_to_live)}")
        body.append("")
        body.append(f"{attr} = SearchIndex({', '.join(args)}{name})")
    return _ENV.get_template("model.py.j2").render(
        table=table,
        class_name=class_name(table.name),
        options=options,
        imports=sorted(imports),
        body=body,
    )


def write_models(catalog: Catalog, directory: Path) -> list[Path]:
    """One module per table in ``directory`` (a package); refuses to overwrite files."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    init = directory / "__init__.py"
    if not init.exists():
        init.write_text('"""Models adopted from a live instance by tsmigrate inspect --write-models."""\n')
    for table in catalog.tables:
        path = directory / f"{table.name.lower()}.py"
        if path.exists():
            raise ConfigError(f"{path} exists; remove it or write the models to another directory")
        path.write_text(table_source(table), encoding="utf-8")
        written.append(path)
    return written
