"""The ``op`` object revision scripts call: it collects operations, it executes nothing.

Each call becomes the declarative engine's own Step (``tsmigrate.planning.ops``), built against the schema
as it stands at that point of the chain (``op.catalog``): ``op.update_options("t", max_versions=1)``
knows the options it changes from, ``op.drop_index("t", "by_x")`` the index it drops, and a call
that cannot apply (an unknown table or index, a table created twice) is an ``OperationError`` at
once, before anything runs. Data migrations are two records besides the Steps: ``Backfill``
(``op.backfill``) and ``TransformedRewrite`` (``op.rewrite_table(..., transform=fn)``). Executing
the collected operations against an instance is the runner's job.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import attrs

from tsmigrate.planning import ops
from tsmigrate.planning.plan import key_change
from tsmigrate.schema import (
    GLOBAL,
    Catalog,
    DefinedColumn,
    ReservedThroughput,
    SearchIndex,
    SecondaryIndex,
    StreamSpec,
    Table,
    physical_table,
)
from tsmigrate.schema.model import Model, column_type, parse_duration
from tsmigrate.versions.errors import IrreversibleError, OperationError

RowFunction = Callable[[dict[str, Any]], dict[str, Any] | None]


@attrs.frozen
class Backfill:
    """A data migration: ``fn`` gets each row of ``table`` (its key and ``columns``, newest
    versions; every column when ``columns`` is None) and returns the cells to set (a value, or
    None to delete the cell); None or {} leaves the row as it is."""

    kind: ClassVar[str] = "backfill"
    symbol: ClassVar[str] = "~"

    table: str
    fn: RowFunction = attrs.field(eq=False, repr=False)
    columns: tuple[str, ...] | None
    reference: str  # "<script path>:<qualname>", for load_callable in another process

    @property
    def risk(self) -> str:
        return ops.DATA_COPY

    @property
    def reason(self) -> str:
        return "every row is read and the cells the function returns are written (UpdateRow)"

    def summary(self) -> str:
        reads = ", ".join(self.columns) if self.columns is not None else "every column"
        return f"backfill {self.table} with {self.fn.__qualname__} (reads {reads})"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "risk": self.risk, "summary": self.summary(),
                "args": {"table": self.table, "columns": None if self.columns is None
                         else list(self.columns), "function": self.reference}}


@attrs.frozen
class TransformedRewrite:
    """``rewrite_table`` with a ``transform``: each row's natural field values (its key with the
    source's derivations undone, and its columns) go through ``transform`` before the target
    key is built (keys no derivation expresses). ``step`` is the engine's own RewriteTable."""

    kind: ClassVar[str] = "rewrite_table"
    symbol: ClassVar[str] = "-/+"

    step: ops.RewriteTable
    source: Table
    target: Table
    transform: RowFunction = attrs.field(eq=False, repr=False)
    reference: str

    @property
    def table(self) -> str:
        return self.step.table

    @property
    def risk(self) -> str:
        return self.step.risk

    @property
    def reason(self) -> str:
        return self.step.reason

    def summary(self) -> str:
        return f"{self.step.summary()} (keys through {self.transform.__qualname__})"

    def to_dict(self) -> dict[str, Any]:
        data = self.step.to_dict()
        data["summary"] = self.summary()
        data["args"]["transform"] = self.reference
        return data


Operation = ops.Step | Backfill | TransformedRewrite


def script_table(table: Table) -> Table:
    """What the versioned chain knows of a table: what the service stores, plus the key
    derivations and the attribute columns derivations and search indexes read (so a later change
    of derivation is seen, and a rewrite or an index knows its columns' types)."""
    sources = {s for c in table.primary_key if c.derivation is not None for s in c.derivation.sources}
    sources |= {f.name for index in table.search_indexes for f in index.fields}
    return attrs.evolve(physical_table(table), primary_key=table.primary_key,
                        attributes=[a for a in table.attributes if a.name in sources])


def next_catalog(catalog: Catalog, operation: Operation) -> Catalog:
    """The schema after ``operation`` (a created table as ``script_table`` gives it; data
    operations change no schema)."""
    if isinstance(operation, (Backfill, TransformedRewrite)):
        return catalog
    if isinstance(operation, ops.CreateTable):
        return Catalog(tables=(*catalog.tables, script_table(operation.definition)))
    return ops.transform(catalog, operation)


def _column(spec: DefinedColumn | tuple[str, Any]) -> DefinedColumn:
    if isinstance(spec, DefinedColumn):
        return spec
    if isinstance(spec, (tuple, list)) and len(spec) == 2 and isinstance(spec[0], str):
        return DefinedColumn(spec[0], column_type(spec[1]))
    raise OperationError(
        f"a defined column is DefinedColumn(name, type) or (name, type) such as ('status', str), "
        f"got {spec!r}"
    )


class Operations:
    """The ``op`` a script's ``upgrade(op)`` / ``downgrade(op)`` receives."""

    def __init__(self, catalog: Catalog | None = None, script: Any = None):
        self.catalog = catalog if catalog is not None else Catalog()
        self.operations: list[Operation] = []
        self._script = script

    # -- helpers ------------------------------------------------------------------------------

    def _where(self) -> str:
        script = self._script
        return f"revision {script.revision} ({script.path})" if script is not None else "op"

    def _fail(self, message: str) -> OperationError:
        return OperationError(f"{self._where()}: {message}")

    def _table(self, name: str) -> Table:
        table = self.catalog.table(name)
        if table is None:
            known = ", ".join(t.name for t in self.catalog.tables) or "none"
            raise self._fail(f"table {name!r} does not exist at this point of the chain "
                             f"(tables: {known})")
        return table

    def _table_of(self, definition: Table | type[Model]) -> Table:
        if isinstance(definition, Table):
            return definition
        if isinstance(definition, type) and issubclass(definition, Model):
            return definition.table()
        raise self._fail(f"expected a schema Table or a Model class, got {definition!r}")

    def _add(self, operation: Operation) -> None:
        self.catalog = next_catalog(self.catalog, operation)
        self.operations.append(operation)

    def _reference(self, fn: Any, what: str) -> str:
        qualname = getattr(fn, "__qualname__", "")
        module = sys.modules.get(getattr(fn, "__module__", "") or "")
        if (not callable(fn) or "<" in qualname or module is None
                or getattr(module, qualname.split(".")[0], None) is None):
            raise self._fail(
                f"{what} must be a function defined at the top level of the script (it is run "
                f"again by worker processes and by a resumed run), got {fn!r}"
            )
        if self._script is not None and module is self._script.module:
            return self._script.reference(fn)
        return f"{module.__name__}:{qualname}"

    # -- tables -------------------------------------------------------------------------------

    def create_table(self, definition: Table | type[Model]) -> None:
        """Create a table (a schema Table, or a Model class), then its search indexes."""
        table = self._table_of(definition)
        if self.catalog.table(table.name) is not None:
            raise self._fail(f"table {table.name!r} already exists at this point of the chain")
        self._add(ops.CreateTable(table.name, attrs.evolve(table, search_indexes=())))
        for index in table.search_indexes:
            self._add(ops.CreateSearchIndex(table.name, index))

    def drop_table(self, name: str) -> None:
        """Drop a table (its search indexes first: the service refuses otherwise)."""
        for index in self._table(name).search_indexes:
            self._add(ops.DropSearchIndex(name, index))
        self._add(ops.DropTable(name))

    def retire_table(self, name: str, archive: str) -> None:
        """Archive a table's rows (cell timestamps included) to ``archive``, then drop it."""
        self._table(name)
        self._add(ops.RetireTable(name, archive=archive))

    def update_options(self, table: str, *, time_to_live: Any = attrs.NOTHING,
                       max_versions: int | None = None, max_time_deviation: Any = None,
                       allow_update: bool | None = None) -> None:
        """Change table options; durations as in models ('90d', 86400, None for no TTL)."""
        before = self._table(table).options
        changes: dict[str, Any] = {}
        try:
            if time_to_live is not attrs.NOTHING:
                changes["time_to_live"] = parse_duration(time_to_live)
            if max_time_deviation is not None:
                changes["max_time_deviation"] = parse_duration(max_time_deviation)
        except ValueError as exc:
            raise self._fail(f"update_options({table!r}): {exc}") from None
        if max_versions is not None:
            changes["max_versions"] = max_versions
        if allow_update is not None:
            changes["allow_update"] = allow_update
        after = attrs.evolve(before, **changes)
        if after != before:
            self._add(ops.UpdateOptions(table, before, after))

    def update_throughput(self, table: str, *, read: int | None = None,
                          write: int | None = None) -> None:
        before = self._table(table).throughput
        after = ReservedThroughput(read=before.read if read is None else read,
                                   write=before.write if write is None else write)
        if after != before:
            self._add(ops.UpdateThroughput(table, before, after))

    # -- defined columns ------------------------------------------------------------------------

    def add_defined_columns(self, table: str, *columns: DefinedColumn | tuple[str, Any]) -> None:
        existing = {c.name for c in self._table(table).defined_columns}
        wanted = [_column(c) for c in columns]
        taken = [c.name for c in wanted if c.name in existing]
        if taken:
            raise self._fail(f"table {table!r} already has defined column(s) {', '.join(taken)}")
        if wanted:
            self._add(ops.AddDefinedColumns(table, wanted))

    def delete_defined_columns(self, table: str, *names: str) -> None:
        existing = {c.name: c for c in self._table(table).defined_columns}
        missing = [n for n in names if n not in existing]
        if missing:
            raise self._fail(f"table {table!r} has no defined column(s) {', '.join(missing)} "
                             f"(it has: {', '.join(existing) or 'none'})")
        if names:
            self._add(ops.DeleteDefinedColumns(table, [existing[n] for n in names]))

    # -- secondary indexes ------------------------------------------------------------------------

    def create_index(self, table: str, index: SecondaryIndex | str, keys: Iterable[str] = (),
                     include: Iterable[str] = (), type: str = GLOBAL) -> None:
        """Create a secondary index: a SecondaryIndex, or its name with keys/include/type."""
        if isinstance(index, str):
            index = SecondaryIndex(name=index, keys=tuple(keys), include=tuple(include),
                                   type=type.upper())
        current = self._table(table)
        if any(i.name == index.name for i in current.secondary_indexes):
            raise self._fail(f"table {table!r} already has secondary index {index.name!r}")
        self._add(ops.CreateIndex(table, index))

    def drop_index(self, table: str, name: str) -> None:
        index = next((i for i in self._table(table).secondary_indexes if i.name == name), None)
        if index is None:
            raise self._fail(f"table {table!r} has no secondary index {name!r}")
        self._add(ops.DropIndex(table, index))

    # -- search indexes ---------------------------------------------------------------------------

    def create_search_index(self, table: str, index: SearchIndex) -> None:
        if not isinstance(index, SearchIndex):
            raise self._fail(f"create_search_index takes a tsmigrate.schema.SearchIndex, got {index!r}")
        if any(i.name == index.name for i in self._table(table).search_indexes):
            raise self._fail(f"table {table!r} already has search index {index.name!r}")
        self._add(ops.CreateSearchIndex(table, index))

    def drop_search_index(self, table: str, name: str) -> None:
        index = next((i for i in self._table(table).search_indexes if i.name == name), None)
        if index is None:
            raise self._fail(f"table {table!r} has no search index {name!r}")
        self._add(ops.DropSearchIndex(table, index))

    def reindex_search_index(self, table: str, index: SearchIndex) -> None:
        """Give a search index a new schema without downtime: rebuilt beside the old one and
        switched in under its name (``index`` is the complete new schema, its name the index's)."""
        if not isinstance(index, SearchIndex):
            raise self._fail(f"reindex_search_index takes a tsmigrate.schema.SearchIndex, got {index!r}")
        current = next((i for i in self._table(table).search_indexes if i.name == index.name), None)
        if current is None:
            raise self._fail(f"table {table!r} has no search index {index.name!r}")
        if current != index:
            before = attrs.evolve(current, time_to_live=index.time_to_live)
            self._add(ops.ReindexSearchIndex(table, before, index))

    def update_search_index_ttl(self, table: str, index: str, ttl: Any) -> None:
        current = next((i for i in self._table(table).search_indexes if i.name == index), None)
        if current is None:
            raise self._fail(f"table {table!r} has no search index {index!r}")
        try:
            after = parse_duration(ttl)
        except ValueError as exc:
            raise self._fail(f"update_search_index_ttl({table!r}, {index!r}): {exc}") from None
        if after != current.time_to_live:
            self._add(ops.UpdateSearchIndexTTL(table, index, current.time_to_live, after))

    # -- streams ----------------------------------------------------------------------------------

    def update_stream(self, table: str, enabled: bool = True, expiration_hours: int = 24) -> None:
        current = self._table(table).stream
        before = current if current.enabled else StreamSpec()
        after = StreamSpec(enabled=True, expiration_hours=expiration_hours) if enabled else StreamSpec()
        if after != before:
            self._add(ops.UpdateStream(table, before, after))

    # -- data -------------------------------------------------------------------------------------

    def rewrite_table(self, source: str, target: Table | type[Model],
                      transform: RowFunction | None = None) -> None:
        """Create ``target`` (a new table: Tablestore cannot change a key in place) and copy the
        rows of ``source`` into it with their keys rebuilt (through ``transform`` if given)."""
        old = self._table(source)
        new = self._table_of(target)
        reference = self._reference(transform, "transform=") if transform is not None else ""
        change = key_change(old, new) or "the table gets a new name"
        self.create_table(new)
        step = ops.RewriteTable(new.name, source, change)
        if transform is None:
            self._add(step)
        else:
            self._add(TransformedRewrite(step=step, source=old, target=new, transform=transform,
                                         reference=reference))

    def backfill(self, table: str, fn: RowFunction, columns: Iterable[str] | None = None) -> None:
        """Run ``fn`` over every row of ``table`` (see ``Backfill``)."""
        self._table(table)
        reference = self._reference(fn, "backfill's fn")
        if isinstance(columns, str):
            columns = (columns,)
        names = None if columns is None else tuple(columns)
        if names is not None and not all(isinstance(n, str) and n for n in names):
            raise self._fail(f"backfill columns must be column names, got {columns!r}")
        self._add(Backfill(table=table, fn=fn, columns=names, reference=reference))

    def irreversible(self, reason: str) -> None:
        """Refuse this downgrade (raised while collecting, so nothing has been applied)."""
        raise IrreversibleError(f"{self._where()} cannot be downgraded: {reason}")

