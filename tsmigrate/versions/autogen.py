"""Autogenerate: render the Steps between two catalogs as a revision script's ``upgrade`` and
``downgrade``, through a jinja2 template the project can override.

Each Step becomes the ``op`` call that collects exactly that Step again (``op.create_index("t",
SecondaryIndex(...))``), so replaying the generated script gives the catalog the Steps lead to
(tested as a property over random catalogs). Schema values are written as constructor calls of
``tsmigrate.schema`` and ``tsmigrate.keys`` classes, defaults left out.

``downgrade`` is the inverse of each Step, in reverse order. A Step whose effect cannot be undone
without loss (a dropped table's rows, cells a lower TTL or fewer versions purged, stream records,
rows services wrote into a rewrite's new table) makes ``downgrade`` start with
``op.irreversible(reason)``: it raises until the author decides what to do and deletes that line
(the schema inverse is written after it, commented out where running it would lose data).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import attrs
import jinja2

from tsmigrate import __version__
from tsmigrate.planning import ops
from tsmigrate.schema import Catalog, Table
from tsmigrate.versions.op import next_catalog, script_table

TEMPLATE = "script.py.j2"
WIDTH = 100
INDENT = "    "
_CALL = 32  # room for the op call around a value: "op.create_search_index('table', "


# --- Python source for schema values ------------------------------------------------------------


class Source:
    """Renders values as Python source and remembers which classes it needs to import."""

    def __init__(self) -> None:
        self.imports: dict[str, set[str]] = {}

    def import_lines(self) -> list[str]:
        lines = []
        for module, names in sorted(self.imports.items()):
            line = f"from {module} import {', '.join(sorted(names))}"
            if len(line) > WIDTH:
                listed = "".join(f"{INDENT}{name},\n" for name in sorted(names))
                line = f"from {module} import (\n{listed})"
            lines.append(line)
        return lines

    def value(self, value: Any, indent: int = 0) -> str:
        """``value`` as source; broken over lines (items one level deeper than ``indent``, which
        counts levels inside the function body) when one line would be too long."""
        flat = self._flat(value)
        if len(flat) + len(INDENT) * (indent + 1) + _CALL <= WIDTH:
            return flat
        return self._broken(value, indent)

    def _parts(self, value: Any) -> tuple[str, str, list[tuple[str | None, Any]]] | None:
        """(opening, closing, [(keyword or None, item)]) for values that have parts."""
        if attrs.has(type(value)):
            cls = type(value)
            self.imports.setdefault(cls.__module__, set()).add(cls.__name__)
            items: list[tuple[str | None, Any]] = []
            for field in attrs.fields(cls):
                if not field.init or not field.eq:
                    continue
                current = getattr(value, field.name)
                default = field.default
                if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                    default = default.factory()
                if default is not attrs.NOTHING:
                    converted = field.converter(default) if field.converter else default
                    if current == converted:
                        continue
                items.append((None if field.name == "name" and not items else field.name, current))
            return f"{cls.__name__}(", ")", items
        if isinstance(value, (tuple, list)):
            if value and all(isinstance(i, tuple) and len(i) == 2 and isinstance(i[0], str)
                             for i in value):
                return "{", "}", [(None, _Pair(k, v)) for k, v in value]
            return "[", "]", [(None, v) for v in value]
        if isinstance(value, dict):
            return "{", "}", [(None, _Pair(k, v)) for k, v in value.items()]
        return None

    def _item(self, keyword: str | None, item: Any, render: Callable[[Any], str]) -> str:
        if isinstance(item, _Pair):
            return f"{item.key!r}: {render(item.value)}"
        return f"{keyword}={render(item)}" if keyword else render(item)

    def _flat(self, value: Any) -> str:
        parts = self._parts(value)
        if parts is None:
            return repr(value)
        opening, closing, items = parts
        return opening + ", ".join(self._item(k, v, self._flat) for k, v in items) + closing

    def _broken(self, value: Any, indent: int) -> str:
        parts = self._parts(value)
        if parts is None:
            return repr(value)
        opening, closing, items = parts
        inner = INDENT * (indent + 1)
        lines = [f"{inner}{self._item(k, v, lambda x: self.value(x, indent + 1))}," for k, v in items]
        return opening + "\n" + "\n".join(lines) + "\n" + INDENT * indent + closing


@attrs.frozen
class _Pair:
    key: str
    value: Any


def _duration(seconds: int) -> str:
    if seconds == -1:
        return "None"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return repr(f"{seconds // size}{unit}")
    return repr(seconds)


# --- Steps -> op calls ---------------------------------------------------------------------------


def _option_args(before: Any, after: Any) -> str:
    args = []
    for field in attrs.fields(type(after)):
        old, new = getattr(before, field.name), getattr(after, field.name)
        if old != new:
            durations = ("time_to_live", "max_time_deviation")
            args.append(f"{field.name}={_duration(new) if field.name in durations else repr(new)}")
    return ", ".join(args)


def op_call(step: ops.Step, src: Source, before: Catalog) -> str:
    """The ``op`` call that collects ``step`` again, against the schema ``before`` it."""
    t = repr(step.table)
    if isinstance(step, ops.CreateTable):
        return f"op.create_table({src.value(script_table(step.definition))})"
    if isinstance(step, ops.DropTable):
        return f"op.drop_table({t})"
    if isinstance(step, ops.RetireTable):
        return f"op.retire_table({t}, archive={step.archive!r})"
    if isinstance(step, ops.UpdateOptions):
        return f"op.update_options({t}, {_option_args(step.before, step.after)})"
    if isinstance(step, ops.UpdateThroughput):
        return f"op.update_throughput({t}, {_option_args(step.before, step.after)})"
    if isinstance(step, ops.AddDefinedColumns):
        return f"op.add_defined_columns({t}, {', '.join(src.value(c) for c in step.columns)})"
    if isinstance(step, ops.DeleteDefinedColumns):
        return f"op.delete_defined_columns({t}, {', '.join(repr(c.name) for c in step.columns)})"
    if isinstance(step, ops.CreateIndex):
        return f"op.create_index({t}, {src.value(step.index)})"
    if isinstance(step, ops.DropIndex):
        return f"op.drop_index({t}, {step.index.name!r})"
    if isinstance(step, ops.CreateSearchIndex):
        return f"op.create_search_index({t}, {src.value(step.index)})"
    if isinstance(step, ops.DropSearchIndex):
        return f"op.drop_search_index({t}, {step.index.name!r})"
    if isinstance(step, ops.ReindexSearchIndex):
        return f"op.reindex_search_index({t}, {src.value(step.index)})"
    if isinstance(step, ops.UpdateSearchIndexTTL):
        return f"op.update_search_index_ttl({t}, {step.index!r}, {_duration(step.after)})"
    if isinstance(step, ops.UpdateStream):
        if not step.after.enabled:
            return f"op.update_stream({t}, enabled=False)"
        return f"op.update_stream({t}, enabled=True, expiration_hours={step.after.expiration_hours})"
    raise TypeError(f"no op call renders step {step.kind}")  # a Step kind added without one


def _rewrite_call(step: ops.RewriteTable, target: Table, src: Source) -> str:
    return f"op.rewrite_table({step.source!r}, {src.value(script_table(target))})"


def _lossy(step: ops.Step, before: Catalog) -> str | None:
    """Why undoing ``step`` cannot give back what it removed, or None when it can."""
    if isinstance(step, ops.DropTable):
        return f"upgrade dropped table {step.table} with its rows: recreating it gives an empty table"
    if isinstance(step, ops.RetireTable):
        return (f"upgrade archived and dropped table {step.table}: `tsmigrate restore` loads the "
                f"archive in {step.archive} back")
    if isinstance(step, ops.RewriteTable):
        return (f"services write {step.table} once they cut over: dropping it loses their writes "
                f"({step.source} is kept until `tsmigrate rewrite finish --allow-destructive`)")
    if isinstance(step, (ops.UpdateOptions, ops.UpdateSearchIndexTTL, ops.UpdateStream)) and \
            step.risk == ops.DESTRUCTIVE:
        return f"upgrade step '{step.summary()}': {step.reason}; going back does not restore them"
    return None


def inverse_calls(step: ops.Step, src: Source, before: Catalog) -> list[str]:
    """The op calls that undo ``step`` (``before`` is the schema before the step)."""
    t = repr(step.table)
    if isinstance(step, ops.CreateTable):
        return [f"op.drop_table({t})"]
    if isinstance(step, (ops.DropTable, ops.RetireTable)):
        old = before.table(step.table)
        assert old is not None
        bare = attrs.evolve(old, search_indexes=())
        return [f"op.create_table({src.value(script_table(bare))})",
                *(f"op.create_search_index({t}, {src.value(i)})" for i in old.search_indexes)]
    if isinstance(step, ops.UpdateOptions):
        return [f"op.update_options({t}, {_option_args(step.after, step.before)})"]
    if isinstance(step, ops.UpdateThroughput):
        return [f"op.update_throughput({t}, {_option_args(step.after, step.before)})"]
    if isinstance(step, ops.AddDefinedColumns):
        return [f"op.delete_defined_columns({t}, {', '.join(repr(c.name) for c in step.columns)})"]
    if isinstance(step, ops.DeleteDefinedColumns):
        return [f"op.add_defined_columns({t}, {', '.join(src.value(c) for c in step.columns)})"]
    if isinstance(step, ops.CreateIndex):
        return [f"op.drop_index({t}, {step.index.name!r})"]
    if isinstance(step, ops.DropIndex):
        return [f"op.create_index({t}, {src.value(step.index)})"]
    if isinstance(step, ops.CreateSearchIndex):
        return [f"op.drop_search_index({t}, {step.index.name!r})"]
    if isinstance(step, ops.DropSearchIndex):
        return [f"op.create_search_index({t}, {src.value(step.index)})"]
    if isinstance(step, ops.ReindexSearchIndex):
        return [f"op.reindex_search_index({t}, {src.value(step.before)})"]
    if isinstance(step, ops.UpdateSearchIndexTTL):
        return [f"op.update_search_index_ttl({t}, {step.index!r}, {_duration(step.before)})"]
    if isinstance(step, ops.UpdateStream):
        if not step.before.enabled:
            return [f"op.update_stream({t}, enabled=False)"]
        return [f"op.update_stream({t}, enabled=True, "
                f"expiration_hours={step.before.expiration_hours})"]
    if isinstance(step, ops.RewriteTable):
        return [f"op.drop_table({t})"]
    raise TypeError(f"no inverse renders step {step.kind}")


@attrs.frozen
class Bodies:
    upgrade: str
    downgrade: str
    imports: tuple[str, ...]
    irreversible: tuple[str, ...]


def render_bodies(before: Catalog, steps: Sequence[ops.Step]) -> Bodies:
    """``upgrade`` and ``downgrade`` bodies (indented) for ``steps`` applied to ``before``."""
    src = Source()
    rewrites = {s.table: s for s in steps if isinstance(s, ops.RewriteTable)}
    created: dict[str, Table] = {}
    upgrade: list[str] = []
    undo: list[list[str]] = []
    reasons: list[str] = []
    catalog = before
    for step in steps:
        if step.table in rewrites and isinstance(step, (ops.CreateTable, ops.CreateSearchIndex)):
            # op.rewrite_table creates the new table (and its search indexes) itself.
            if isinstance(step, ops.CreateTable):
                created[step.table] = step.definition
            else:
                table = created[step.table]
                created[step.table] = attrs.evolve(
                    table, search_indexes=(*table.search_indexes, step.index))
            catalog = next_catalog(catalog, step)
            continue
        if step.risk != ops.SAFE and step.reason:
            upgrade.append(f"# {step.risk}: {step.reason}")
        if isinstance(step, ops.RewriteTable):
            upgrade.append(_rewrite_call(step, created[step.table], src))
        else:
            upgrade.append(op_call(step, src, catalog))
        lossy = _lossy(step, catalog)
        calls = inverse_calls(step, src, catalog)
        if lossy is not None:
            reasons.append(lossy)
            calls = [f"# {line}" for call in calls for line in call.splitlines()]
        undo.append(calls)
        catalog = next_catalog(catalog, step)
    downgrade: list[str] = []
    if reasons:
        downgrade.append(f"op.irreversible({'; '.join(reasons)!r})")
        downgrade.append("# Decide what to do instead, then delete the line above. The schema")
        downgrade.append("# inverse follows; the lossy steps' inverses are commented out.")
    for calls in reversed(undo):
        downgrade.extend(calls)

    def body(lines: list[str]) -> str:
        text = "\n".join(lines) or "pass"
        return "\n".join(INDENT + line if line else line for line in text.splitlines())

    return Bodies(body(upgrade), body(downgrade), tuple(src.import_lines()), tuple(reasons))


# --- the script file ---------------------------------------------------------------------------


def new_revision_id() -> str:
    return uuid.uuid4().hex[:12]


def slug(message: str) -> str:
    text = re.sub(r"[^a-z0-9]+", "_", message.lower()).strip("_")
    return text[:40].rstrip("_") or "revision"


def template_environment(migrations_dir: Path | None) -> jinja2.Environment:
    """``<migrations>/script.py.j2`` of the project wins over tsmigrate's packaged template."""
    loaders: list[jinja2.BaseLoader] = []
    if migrations_dir is not None:
        loaders.append(jinja2.FileSystemLoader(str(migrations_dir)))
    loaders.append(jinja2.PackageLoader("tsmigrate.versions", "templates"))
    env = jinja2.Environment(loader=jinja2.ChoiceLoader(loaders), keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["pyrepr"] = repr
    env.filters["docstring"] = lambda text: str(text).replace("\\", "\\\\").replace('"""', '\\"""')
    return env


def render_script(*, revision: str, parents: Sequence[str], message: str, bodies: Bodies,
                  migrations_dir: Path | None, created: datetime | None = None) -> str:
    """The script's source, from the template. Its context: ``revision``, ``down_revision`` (the
    Python literal), ``parents`` (a list), ``message``, ``created`` (ISO time, UTC),
    ``tsmigrate_version``, ``imports`` (lines), ``upgrade`` and ``downgrade`` (indented bodies),
    ``irreversible`` (the reasons a downgrade refuses, if any)."""
    if not parents:
        down_revision = "None"
    elif len(parents) == 1:
        down_revision = repr(parents[0])
    else:
        down_revision = repr(tuple(parents))
    template = template_environment(migrations_dir).get_template(TEMPLATE)
    return template.render(
        revision=revision,
        down_revision=down_revision,
        parents=list(parents),
        message=message,
        created=(created or datetime.now(timezone.utc)).isoformat(timespec="seconds"),
        tsmigrate_version=__version__,
        imports=list(bodies.imports),
        upgrade=bodies.upgrade,
        downgrade=bodies.downgrade,
        irreversible=list(bodies.irreversible),
    )
