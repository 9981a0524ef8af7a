"""Plan steps: operations as data, kept apart from their execution (the adapter runs them).

Each step knows its risk and says why in one sentence:

- ``safe``: no data is lost and nothing a service reads disappears;
- ``data-copy``: rows are copied into a new table (a rewrite) or indexed again into a new search
  index (a reindex) while the old one keeps serving;
- ``destructive``: data, versions or an access path are lost, or stream records are dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import attrs

from tsmigrate.schema import (
    Catalog,
    DefinedColumn,
    IndexSorter,
    ReservedThroughput,
    SearchField,
    SearchIndex,
    SecondaryIndex,
    StreamSpec,
    Table,
    TableOptions,
    physical_table,
    table_to_dict,
)
from tsmigrate.schema.render import duration

SAFE, DATA_COPY, DESTRUCTIVE = "safe", "data-copy", "destructive"
RISKS = (SAFE, DATA_COPY, DESTRUCTIVE)


def _plain(value: Any) -> Any:
    if isinstance(value, Table):
        return table_to_dict(value)
    if attrs.has(type(value)):
        return {a.name: _plain(getattr(value, a.name)) for a in attrs.fields(type(value)) if a.eq}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


@attrs.frozen
class Step:
    """Base: ``kind`` names the operation, ``table`` the data table it touches."""

    kind: ClassVar[str]
    symbol: ClassVar[str] = "~"  # + create, - drop, ~ update, -/+ replace

    table: str

    @property
    def risk(self) -> str:
        return SAFE

    @property
    def reason(self) -> str:
        return ""

    def summary(self) -> str:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        data = {"kind": self.kind, "risk": self.risk, "summary": self.summary(),
                "reason": self.reason}
        data["args"] = {a.name: _plain(getattr(self, a.name)) for a in attrs.fields(type(self))}
        return data


@attrs.frozen
class CreateTable(Step):
    kind = "create_table"
    symbol = "+"

    definition: Table

    @property
    def reason(self) -> str:
        return "a new, empty table"

    def summary(self) -> str:
        pk = ", ".join(f"{c.name} {c.type}" for c in self.definition.primary_key)
        indexes = len(self.definition.secondary_indexes)
        extra = f" with {indexes} secondary index{'es' if indexes != 1 else ''}" if indexes else ""
        return f"create table {self.table} ({pk}){extra}"


@attrs.frozen
class DropTable(Step):
    kind = "drop_table"
    symbol = "-"

    @property
    def risk(self) -> str:
        return DESTRUCTIVE

    @property
    def reason(self) -> str:
        return f"deletes table {self.table} with all its rows and secondary indexes; it cannot be undone"

    def summary(self) -> str:
        return f"drop table {self.table}"


@attrs.frozen
class RetireTable(Step):
    """A month of a table family past its retention: archive its rows, then drop the table."""

    kind = "retire_table"
    symbol = "-"

    archive: str

    @property
    def risk(self) -> str:
        return DESTRUCTIVE

    @property
    def reason(self) -> str:
        return (
            f"the month is past the family's retention: its rows (cell timestamps included) are "
            f"archived to {self.archive}, then table {self.table} is dropped; "
            "`tsmigrate restore` loads the archive back"
        )

    def summary(self) -> str:
        return f"archive and drop table {self.table} (expired month)"


def _option_effects(before: TableOptions, after: TableOptions) -> tuple[str, list[str]]:
    """The risk of an options change and one sentence per changed option."""
    risk, notes = SAFE, []
    if before.time_to_live != after.time_to_live:
        b, a = before.time_to_live, after.time_to_live
        if a != -1 and (b == -1 or a < b):
            risk = DESTRUCTIVE
            notes.append(
                f"lowering TTL from {duration(b)} to {duration(a)} deletes cells older than "
                f"{duration(a)}"
            )
        else:
            notes.append(
                f"raising TTL from {duration(b)} to {duration(a)} keeps cells longer "
                "(cells not yet purged may become readable again)"
            )
    if before.max_versions != after.max_versions:
        b, a = before.max_versions, after.max_versions
        if a < b:
            risk = DESTRUCTIVE
            notes.append(
                f"lowering max versions from {b} to {a} deletes all but the newest {a} "
                f"version{'s' if a != 1 else ''} of every cell"
            )
        else:
            notes.append(
                f"raising max versions from {b} to {a} can make old versions readable again"
            )
    if before.max_time_deviation != after.max_time_deviation:
        notes.append(
            f"max time deviation {duration(before.max_time_deviation)} -> "
            f"{duration(after.max_time_deviation)} changes which explicit timestamps writes accept"
        )
    if before.allow_update != after.allow_update:
        notes.append(
            "UpdateRow becomes rejected; services must write whole rows with PutRow"
            if not after.allow_update
            else "UpdateRow becomes allowed"
        )
    return risk, notes


@attrs.frozen
class UpdateOptions(Step):
    kind = "update_options"

    before: TableOptions
    after: TableOptions

    @property
    def risk(self) -> str:
        return _option_effects(self.before, self.after)[0]

    @property
    def reason(self) -> str:
        return "; ".join(_option_effects(self.before, self.after)[1])

    def summary(self) -> str:
        changes = [
            f"{a.name} {_option_value(a.name, getattr(self.before, a.name))} -> "
            f"{_option_value(a.name, getattr(self.after, a.name))}"
            for a in attrs.fields(TableOptions)
            if getattr(self.before, a.name) != getattr(self.after, a.name)
        ]
        return f"update options of {self.table}: {', '.join(changes)}"


def _option_value(name: str, value: Any) -> str:
    """A table option as plans print it: durations as ``90d``, ``2h`` (as models declare them)."""
    return duration(value) if name in ("time_to_live", "max_time_deviation") else repr(value)


@attrs.frozen
class UpdateThroughput(Step):
    kind = "update_throughput"

    before: ReservedThroughput
    after: ReservedThroughput

    @property
    def reason(self) -> str:
        return "the service allows one capacity adjustment every 2 minutes per table"

    def summary(self) -> str:
        return (
            f"reserved CU of {self.table}: read {self.before.read} -> {self.after.read}, "
            f"write {self.before.write} -> {self.after.write}"
        )


@attrs.frozen
class AddDefinedColumns(Step):
    kind = "add_defined_columns"
    symbol = "+"

    columns: tuple[DefinedColumn, ...] = attrs.field(converter=tuple)

    @property
    def reason(self) -> str:
        return "only the declaration is added: rows are not rewritten, and indexes may then use the columns"

    def summary(self) -> str:
        cols = ", ".join(f"{c.name} {c.type}" for c in self.columns)
        return f"add defined columns to {self.table}: {cols}"


@attrs.frozen
class DeleteDefinedColumns(Step):
    kind = "delete_defined_columns"
    symbol = "-"

    columns: tuple[DefinedColumn, ...] = attrs.field(converter=tuple)

    @property
    def reason(self) -> str:
        return "only the declaration goes: the cells stay in the rows as ordinary attributes"

    def summary(self) -> str:
        return f"delete defined columns of {self.table}: {', '.join(c.name for c in self.columns)}"


@attrs.frozen
class CreateIndex(Step):
    kind = "create_index"
    symbol = "+"

    index: SecondaryIndex

    @property
    def reason(self) -> str:
        if self.index.include_base_data:
            return "existing rows are indexed in the background (include_base_data)"
        return "only rows written from now on are indexed"

    def summary(self) -> str:
        include = f" include ({', '.join(self.index.include)})" if self.index.include else ""
        return (
            f"create {self.index.type.lower()} index {self.index.name} on "
            f"{self.table} ({', '.join(self.index.keys)}){include}"
        )


@attrs.frozen
class DropIndex(Step):
    kind = "drop_index"
    symbol = "-"

    index: SecondaryIndex
    replaced: bool = False  # part of a drop + create of a changed index

    @property
    def risk(self) -> str:
        return DESTRUCTIVE

    @property
    def reason(self) -> str:
        if self.replaced:
            return (
                f"secondary indexes cannot be altered: {self.index.name} is dropped and created "
                "again, and queries on it fail until the new one has indexed the table"
            )
        return f"queries that read index {self.index.name} fail once it is gone"

    def summary(self) -> str:
        return f"drop index {self.index.name} of {self.table}"


@attrs.frozen
class CreateSearchIndex(Step):
    kind = "create_search_index"
    symbol = "+"

    index: SearchIndex

    @property
    def reason(self) -> str:
        return "the index syncs existing rows first (phase FULL), then follows writes (INCR)"

    def summary(self) -> str:
        fields = ", ".join(f"{f.name}:{f.type.lower()}" for f in self.index.fields)
        return f"create search index {self.index.name} on {self.table} ({fields})"


@attrs.frozen
class DropSearchIndex(Step):
    kind = "drop_search_index"
    symbol = "-"

    index: SearchIndex
    replaced: bool = False
    # Why a changed index cannot be reindexed, when ``replaced``.
    why: str = ""

    @property
    def risk(self) -> str:
        return DESTRUCTIVE

    @property
    def reason(self) -> str:
        if self.replaced:
            because = f" because {self.why}" if self.why else ""
            return (
                f"search index {self.index.name} cannot be reindexed{because}: it is dropped and "
                "created again, and searches on it fail until the new one has synced every row"
            )
        return f"searches on {self.index.name} fail once it is gone"

    def summary(self) -> str:
        return f"drop search index {self.index.name} of {self.table}"


def _sort_text(sorters: tuple[IndexSorter, ...]) -> str:
    if not sorters:
        return "the primary key (the default)"
    return ", ".join(f"{'-' if s.order == 'DESC' else ''}{s.field or 'pk'}"
                     f"{':' + s.mode.lower() if s.mode else ''}" for s in sorters)


_FIELD_ATTRIBUTES = ("type", "index", "sort_and_agg", "store", "is_array", "analyzer",
                     "analyzer_parameters", "date_formats", "vector_dimension", "vector_metric")


def _field_change(old: SearchField, new: SearchField) -> str:
    parts = []
    for name in _FIELD_ATTRIBUTES:
        a, b = getattr(old, name), getattr(new, name)
        if a != b:
            parts.append(f"{a} -> {b}" if name == "type" else f"{name} {a!r} -> {b!r}")
    if old.sub_fields != new.sub_fields:
        parts.append("its sub-fields change")
    return f"field {new.name}: {', '.join(parts)}"


def search_index_changes(before: SearchIndex, after: SearchIndex) -> list[str]:
    """What differs between two schemas of a search index, one phrase per change (TTL aside)."""
    old, new = {f.name: f for f in before.fields}, {f.name: f for f in after.fields}
    changes = [f"field {n} added ({new[n].type.lower()})" for n in new if n not in old]
    changes += [f"field {n} removed" for n in old if n not in new]
    changes += [_field_change(old[n], new[n]) for n in new if n in old and old[n] != new[n]]
    if before.routing_fields != after.routing_fields:
        changes.append(f"routing ({', '.join(before.routing_fields)}) -> "
                       f"({', '.join(after.routing_fields)})")
    if before.index_sort != after.index_sort:
        changes.append(f"presort {_sort_text(before.index_sort)} -> {_sort_text(after.index_sort)}")
    return changes


@attrs.frozen
class ReindexSearchIndex(Step):
    """A changed search index rebuilt beside the old one (``<name>_reindex``, from the old
    index), then switched in under the old name: Tablestore's dynamic schema modification."""

    kind = "reindex_search_index"
    symbol = "~"

    before: SearchIndex
    index: SearchIndex

    @property
    def risk(self) -> str:
        return DATA_COPY

    @property
    def changes(self) -> list[str]:
        return search_index_changes(self.before, self.index)

    @property
    def reason(self) -> str:
        name = self.index.name
        return (
            f"{'; '.join(self.changes)}. The table's rows are indexed again into {name}_reindex "
            f"with the new schema while {name} keeps serving searches with the old one; once it "
            "has caught up and answers the access patterns alike, the two are switched, so "
            f"{name} serves the new schema under its own name, and the old schema is dropped. "
            "Searches never lose the index"
        )

    def summary(self) -> str:
        return f"reindex search index {self.index.name} of {self.table}"


@attrs.frozen
class UpdateSearchIndexTTL(Step):
    kind = "update_search_index_ttl"

    index: str
    before: int
    after: int

    @property
    def risk(self) -> str:
        lowered = self.after != -1 and (self.before == -1 or self.after < self.before)
        return DESTRUCTIVE if lowered else SAFE

    @property
    def reason(self) -> str:
        if self.risk == DESTRUCTIVE:
            return f"index entries older than {duration(self.after)} are purged from the index"
        return "index entries are kept longer"

    def summary(self) -> str:
        return (
            f"search index {self.index} of {self.table}: TTL {duration(self.before)} -> "
            f"{duration(self.after)}"
        )


@attrs.frozen
class UpdateStream(Step):
    kind = "update_stream"

    before: StreamSpec
    after: StreamSpec

    @property
    def risk(self) -> str:
        return DESTRUCTIVE if self.before.enabled and not self.after.enabled else SAFE

    @property
    def reason(self) -> str:
        if not self.after.enabled:
            return "change records not yet consumed are dropped with the stream"
        if not self.before.enabled:
            return "changes are recorded from now on; earlier writes are not in the stream"
        return "records are kept for a different time"

    def summary(self) -> str:
        if not self.after.enabled:
            return f"disable the stream of {self.table}"
        state = "enable" if not self.before.enabled else "change"
        return f"{state} the stream of {self.table} (records kept {self.after.expiration_hours}h)"


@attrs.frozen
class RewriteCost:
    """What a rewrite will copy: ``bytes`` (every version the copy reads) in the ``splits`` key
    ranges apply will cut, and how long that takes at ``rate_mb_s``; ``rate`` says where the
    rate comes from (measured on this instance, or stated), ``basis`` how the size was found."""

    bytes: int
    splits: int
    rate_mb_s: float
    rate: str = ""
    basis: str = ""

    @property
    def seconds(self) -> float:
        return self.bytes / (self.rate_mb_s * 1024 * 1024)

    def text(self) -> str:
        size = self.bytes / 1024
        size_text = next((f"{size / d:,.1f} {unit}" for d, unit in ((1024 * 1024, "GB"), (1024, "MB"))
                          if size >= d), f"{size:,.1f} KB")
        minutes = self.seconds / 60
        time_text = (f"{minutes / 60:,.1f} h" if minutes >= 90 else f"{minutes:,.1f} min"
                     if self.seconds >= 90 else f"{max(1, round(self.seconds))} s")
        basis = f" ({self.basis})" if self.basis else ""
        rate = self.rate or f"at {self.rate_mb_s:g} MB/s"
        return (f"about {size_text} in {self.splits} split{'s' if self.splits != 1 else ''}{basis}: "
                f"about {time_text} to copy {rate}")


@attrs.frozen
class RewriteTable(Step):
    """Copy every row of ``source`` into the new table, deriving the new key, then cut over."""

    kind = "rewrite_table"
    symbol = "-/+"

    source: str
    key_change: str
    # Estimated by plan from the live source (not part of the step's identity).
    cost: RewriteCost | None = attrs.field(default=None, eq=False)
    # What services on the model API must give while the other table takes their writes
    # (plan.routing_note); empty when each model's key gives the other table's key.
    routing: str = attrs.field(default="", eq=False)
    # Why rows written to the new table after the switch cannot be carried back to the old one
    # (``tsmigrate.contract.shapes.revert_problem``); empty when they can.
    revert: str = attrs.field(default="", eq=False)
    # Whether change capture keeps up with the source's writes (``tsmigrate.rewrite.capacity``
    # ``Check``: the figures, a verdict and its text), found by plan; None until then.
    capture: Any = attrs.field(default=None, eq=False)
    # The source key's spread and the new key's, over one sample of the source
    # (``tsmigrate.lint.spread.KeySpread``), measured by plan; None until then.
    key_spread: Any = attrs.field(default=None, eq=False)

    @property
    def risk(self) -> str:
        return DATA_COPY

    @property
    def revert_note(self) -> str:
        """The line plan shows when revert after the switch is not possible, else empty."""
        return f"revert after switch is not possible: {self.revert}" if self.revert else ""

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["args"]["revert"] = {"possible": not self.revert, "reason": self.revert or None}
        spread = None if self.key_spread is None else self.key_spread.to_dict()
        data["args"]["key_spread"] = data["key_spread"] = spread
        return data

    @property
    def reason(self) -> str:
        cost = f"; {self.cost.text()}" if self.cost is not None else ""
        return (
            f"Tablestore cannot change a primary key in place ({self.key_change}): rows of "
            f"{self.source} are copied into {self.table} with their keys rebuilt, changes made "
            f"meanwhile are captured, the copy is verified, then services cut over{cost}"
            + (f"; {self.routing}" if self.routing else "")
        )

    def summary(self) -> str:
        return f"rewrite {self.source} into {self.table}"


STEP_TYPES: dict[str, type[Step]] = {
    cls.kind: cls
    for cls in (
        CreateTable, DropTable, UpdateOptions, UpdateThroughput, AddDefinedColumns,
        DeleteDefinedColumns, CreateIndex, DropIndex, CreateSearchIndex, DropSearchIndex,
        ReindexSearchIndex, UpdateSearchIndexTTL, UpdateStream, RewriteTable,
    )
}


# --- what each step does to the schema: the live catalog after it, as inspection will see it ---


def _on_table(catalog: Catalog, name: str, change: Callable[[Table], Table]) -> Catalog:
    return Catalog(tables=[change(t) if t.name == name else t for t in catalog.tables])


def _without(items: tuple[Any, ...], names: set[str]) -> tuple[Any, ...]:
    return tuple(i for i in items if i.name not in names)


_TRANSFORMS: dict[type[Step], Callable[[Any, Table], Table]] = {
    UpdateOptions: lambda s, t: attrs.evolve(t, options=s.after),
    UpdateThroughput: lambda s, t: attrs.evolve(t, throughput=s.after),
    AddDefinedColumns: lambda s, t: attrs.evolve(
        t, defined_columns=(*_without(t.defined_columns, {c.name for c in s.columns}), *s.columns)
    ),
    DeleteDefinedColumns: lambda s, t: attrs.evolve(
        t, defined_columns=_without(t.defined_columns, {c.name for c in s.columns})
    ),
    CreateIndex: lambda s, t: attrs.evolve(
        t, secondary_indexes=(*t.secondary_indexes, attrs.evolve(s.index, include_base_data=True))
    ),
    DropIndex: lambda s, t: attrs.evolve(
        t, secondary_indexes=_without(t.secondary_indexes, {s.index.name})
    ),
    CreateSearchIndex: lambda s, t: attrs.evolve(t, search_indexes=(*t.search_indexes, s.index)),
    DropSearchIndex: lambda s, t: attrs.evolve(
        t, search_indexes=_without(t.search_indexes, {s.index.name})
    ),
    ReindexSearchIndex: lambda s, t: attrs.evolve(
        t, search_indexes=(*_without(t.search_indexes, {s.index.name}), s.index)
    ),
    UpdateSearchIndexTTL: lambda s, t: attrs.evolve(
        t,
        search_indexes=[
            attrs.evolve(i, time_to_live=s.after) if i.name == s.index else i
            for i in t.search_indexes
        ],
    ),
    UpdateStream: lambda s, t: attrs.evolve(t, stream=s.after),
    RewriteTable: lambda s, t: t,  # rows move; the schema does not
}


def transform(catalog: Catalog, step: Step) -> Catalog:
    """The catalog after ``step``: pure, so a plan can predict every state it passes through."""
    if isinstance(step, CreateTable):
        return Catalog(tables=(*catalog.tables, physical_table(step.definition)))
    if isinstance(step, (DropTable, RetireTable)):
        return Catalog(tables=[t for t in catalog.tables if t.name != step.table])
    return _on_table(catalog, step.table, lambda t: _TRANSFORMS[type(step)](step, t))
