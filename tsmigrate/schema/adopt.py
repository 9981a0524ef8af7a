"""Adoption: write model source for tables that already exist, so a live instance can be brought
under tsmigrate without retyping its schema.

The source compiles back to the same schema, key derivations included (inspection knows those
tsmigrate recorded when it applied), so the next plan shows no changes. The service does not
report attribute columns, so only those the models need are declared: the columns search-index
fields index and the fields key derivations read, typed from what uses them. Writing is all or
nothing: every module is generated and compiled back first, and none is written when one cannot
be (or would overwrite a file without ``overwrite``)."""

from __future__ import annotations

import keyword
import os
import re
import tempfile
import types
from pathlib import Path
from typing import Any

import attrs
import jinja2

from tsmigrate.errors import ConfigError, SchemaError, TsmigrateError
from tsmigrate.keys import Concat, Derivation
from tsmigrate.schema import (
    LOCAL,
    NO_TTL,
    Catalog,
    IndexSorter,
    SearchField,
    Table,
    physical_table,
)
from tsmigrate.schema.model import RESERVED_NAMES, Model, compile_models, forget_models, registered_models
from tsmigrate.schema.render import duration

_PY_TYPES = {"STRING": "str", "INTEGER": "int", "BINARY": "bytes", "DOUBLE": "float", "BOOLEAN": "bool"}

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("tsmigrate.schema", "templates"),
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


# The Python type of an attribute column a search field of this type indexes (an array field
# indexes a string holding a JSON array; DATE takes integers of epoch time or strings).
_SEARCH_COLUMN_TYPES = {"LONG": "int", "DOUBLE": "float", "BOOLEAN": "bool", "DATE": "int"}


def _attribute_columns(table: Table) -> dict[str, str]:
    """Column name -> Python type of the attribute columns the model must declare: those its
    search indexes index and its key derivations read, which the service does not report."""
    declared = {c.name for c in (*table.primary_key, *table.defined_columns)}
    needed: dict[str, str] = {}
    for index in table.search_indexes:
        for field in index.fields:
            kind = "str" if field.is_array else _SEARCH_COLUMN_TYPES.get(field.type, "str")
            needed.setdefault(field.name, kind)
    for column in table.primary_key:
        derivation = column.derivation
        if derivation is None:
            continue
        padded = dict(derivation.pad) if isinstance(derivation, Concat) else {}
        for source in derivation.sources:
            # Time buckets and descending keys compute on integers; Concat pads integers.
            numeric = derivation.output_type == "INTEGER" or source in padded
            needed.setdefault(source, "int" if numeric else "str")
    return {name: kind for name, kind in needed.items() if name not in declared}


def _derivation(derivation: Derivation) -> str:
    """``HashPrefix('device_id', length=6, sep='#')``: the derivation as model source, arguments
    at their defaults left out."""
    values = {k: v for k, v in derivation.to_dict().items() if k != "kind"}
    defaults = {a.name: a.default for a in attrs.fields(type(derivation))
                if a.default is not attrs.NOTHING}
    first, *rest = values
    args = [repr(values[first])]
    args += [f"{k}={values[k]!r}" for k in rest
             if k not in defaults or _plain(defaults[k]) != values[k]]
    return f"{type(derivation).__name__}({', '.join(args)})"


def _plain(value: Any) -> Any:
    """An attrs default in the form ``to_dict`` gives (lists, dicts)."""
    if isinstance(value, tuple):
        return [list(v) if isinstance(v, tuple) else v for v in value]
    return value


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
    derivations: set[str] = set()
    taken: set[str] = set()
    body: list[str] = []
    for column in table.primary_key:
        attr, name = _attribute(column.name, taken)
        auto = ", auto_increment=True" if column.auto_increment else ""
        derive = ""
        if column.derivation is not None:
            derivations.add(type(column.derivation).__name__)
            derive = f", derive={_derivation(column.derivation)}"
        body.append(f"{attr} = PrimaryKey({_PY_TYPES[column.type]}{auto}{derive}{name})")
    attributes = _attribute_columns(table)
    if table.defined_columns or attributes:
        imports.add("Column")
        body.append("")
    for column in table.defined_columns:
        attr, name = _attribute(column.name, taken)
        body.append(f"{attr} = Column({_PY_TYPES[column.type]}, defined=True{name})")
    for column_name, kind in sorted(attributes.items()):
        attr, name = _attribute(column_name, taken)
        body.append(f"{attr} = Column({kind}{name})")
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
        fields = "".join(f"        {_search_field(f)},\n" for f in search.fields)
        args[0] = f"fields=[\n{fields}    ]"
        if name:
            args.append(name.removeprefix(", "))
        body.append("")
        body.append(f"{attr} = SearchIndex(\n" + "".join(f"    {a},\n" for a in args) + ")")
    return _ENV.get_template("model.py.j2").render(
        table=table,
        class_name=class_name(table.name),
        options=options,
        imports=sorted(imports),
        derivations=sorted(derivations),
        body=body,
    )


MODULE_NAME_MAX = 100


def _module_names(catalog: Catalog) -> dict[str, str]:
    """Table name -> module name: lower case, unique, never a keyword or ``__init__``, and short
    enough for a file name (a table name may have 255 characters)."""
    names: dict[str, str] = {}
    used: set[str] = set()
    for table in catalog.tables:
        module = table.name.lower()[:MODULE_NAME_MAX]
        if keyword.iskeyword(module) or module.startswith("__"):
            module = f"t_{module.strip('_')}"
        while module in used:
            module += "_"
        used.add(module)
        names[table.name] = module
    return names


def _compiled(sources: dict[str, str]) -> Catalog:
    """The catalog the generated modules compile to (imported under private module names, and
    their classes then forgotten by the model registry)."""
    before = len(registered_models())
    classes: list[type[Model]] = []
    try:
        for number, source in enumerate(sources.values()):
            module = types.ModuleType(f"_tsmigrate_adopted_{number}")
            exec(compile(source, f"<adopted {module.__name__}>", "exec"), module.__dict__)
            classes += [v for v in vars(module).values()
                        if isinstance(v, type) and issubclass(v, Model) and v is not Model]
        return compile_models(classes)
    finally:
        forget_models(before)


def _as_inspected(table: Table) -> Table:
    """What inspection shows of a table: its physical schema and its key derivations."""
    return attrs.evolve(physical_table(table), primary_key=table.primary_key)


def model_sources(catalog: Catalog) -> dict[str, str]:
    """Module name -> model source for every table of ``catalog``, checked to compile back to
    it (derivations included); a ConfigError names any table that does not."""
    modules = _module_names(catalog)
    sources = {modules[t.name]: table_source(t) for t in catalog.tables}
    try:
        compiled = _compiled(sources)
    except SchemaError as exc:
        listed = "; ".join(f"{p.where()}: {p.message}" for p in exc.problems)
        raise ConfigError(f"the models written for the live tables would not compile ({listed}); "
                          "nothing was written") from None
    for table in catalog.tables:
        back = compiled.table(table.name)
        if back is None or _as_inspected(back) != _as_inspected(table):
            raise ConfigError(f"the model written for table {table.name} does not compile back "
                              "to its live schema; nothing was written")
    return sources


def write_models(catalog: Catalog, directory: Path, *, overwrite: bool = False) -> list[Path]:
    """One module per table in ``directory`` (a package), all or nothing: refuses, writing
    nothing, when a module file exists (unless ``overwrite``) or a model would not compile."""
    if not catalog.tables:
        raise ConfigError("the instance has no tables to write models for; nothing was written")
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"{directory} is not a directory; write the models to a package directory")
    sources = model_sources(catalog)
    paths = {directory / f"{module}.py": source for module, source in sources.items()}
    existing = sorted(str(p) for p in paths if p.exists())
    if existing and not overwrite:
        raise ConfigError(
            f"{len(existing)} model file(s) exist: {', '.join(existing)}; nothing was written. "
            "Remove them, write to another directory, or pass --overwrite to replace them"
        )
    init = directory / "__init__.py"
    if not init.exists():
        paths[init] = '"""Models adopted from a live instance by tsmigrate inspect --write-models."""\n'
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # Staged next to the package (same file system), then moved into place file by file.
        with tempfile.TemporaryDirectory(dir=directory, prefix=".adopting-") as staging:
            staged = []
            for path, source in paths.items():
                temporary = Path(staging) / path.name
                temporary.write_text(source, encoding="utf-8")
                staged.append((temporary, path))
            for temporary, path in staged:
                os.replace(temporary, path)
    except OSError as exc:
        raise TsmigrateError(f"cannot write the models to {directory}: {exc.strerror or exc}") from None
    return sorted(p for p in paths if p != init)
