"""Diff and plan: (live Catalog, target Catalog) -> an ordered Plan of Steps. Pure functions.

Only what Tablestore stores is compared: declared-only parts of the IR (attribute columns, access
patterns, where a model lives) never make a step. A key derivation is compared only when the live
side knows one (tsmigrate records the catalog it applied), since the service itself cannot tell.

A changed search-index schema is reindexed (``reindex_search_index``: rebuilt beside the old
index, then switched in under its name, so searches never lose it) unless the service cannot do
that for it (``reindex_blocker``); then it is dropped and created again, flagged destructive
with the reason. A TTL change alone stays an in-place update.

Order within a table follows the service's prerequisites: search indexes and secondary indexes
are dropped before the columns and options they depend on change, and created after; a search
index TTL changes while the table holds the longer of its old and new TTLs.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timezone
from typing import Any

import attrs

from tsmigrate.contract import shapes
from tsmigrate.errors import Problem, SchemaError
from tsmigrate.planning import ops
from tsmigrate.planning.familyplan import expand_declared_families
from tsmigrate.schema import (
    Catalog,
    PrimaryKeyColumn,
    SearchIndex,
    SecondaryIndex,
    StreamSpec,
    Table,
    TableOptions,
    physical,
)
from tsmigrate.schema.validate import MAX_TABLES_PER_INSTANCE

PLAN_FORMAT = 1


@attrs.frozen
class Undeclared:
    """A live table no model declares: reported, and dropped only when pruning is asked for."""

    name: str
    note: str


@attrs.frozen
class RewriteAhead:
    """A rewrite that apply runs without a plan step for it: the replacing table already exists
    (empty) so apply starts the rewrite (``phase`` None), or an unfinished rewrite that apply
    continues from ``phase`` (the one it was in, or that a failed one goes back to)."""

    table: str
    source: str
    phase: str | None = None
    note: str = ""  # the state it was left in, when that differs from where it goes on
    # Whether change capture keeps up with the source's writes (``tsmigrate.rewrite.capacity``
    # ``Check``), found by plan; None until then.
    capture: Any = attrs.field(default=None, eq=False)

    @property
    def action(self) -> str:
        return "start" if self.phase is None else "continue"

    def summary(self) -> str:
        if self.phase is None:
            return f"start rewrite of {self.source} into {self.table} (the table exists, empty)"
        return f"continue rewrite of {self.source} into {self.table} from phase {self.phase}"

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "source": self.source, "action": self.action,
                "phase": self.phase, "note": self.note, "summary": self.summary(),
                "capture": None if self.capture is None else self.capture.to_dict()}


@attrs.frozen
class Plan:
    """Steps, and fingerprints of the live schema before them (``source``), after each of them
    (``step_fingerprints``) and after all (``target``), as ``tsmigrate inspect`` shows it once
    apply has recorded the models' key derivations (``inspected``); ``models`` is the fingerprint
    of the declared catalog the plan was made for."""

    steps: tuple[ops.Step, ...] = attrs.field(converter=tuple)
    undeclared: tuple[Undeclared, ...] = attrs.field(converter=tuple)
    source_fingerprint: str
    target_fingerprint: str
    models_fingerprint: str = ""
    step_fingerprints: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    # Rewrites apply starts or continues besides the steps (read from the state table, not
    # planned from the schema: see tsmigrate.rewrite.planned)
    rewrites: tuple[RewriteAhead, ...] = attrs.field(default=(), converter=tuple)

    @property
    def has_changes(self) -> bool:
        return bool(self.steps or self.rewrites)

    def by_risk(self, risk: str) -> list[ops.Step]:
        return [s for s in self.steps if s.risk == risk]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "source_fingerprint": self.source_fingerprint,
            "target_fingerprint": self.target_fingerprint,
            "models_fingerprint": self.models_fingerprint,
            "has_changes": self.has_changes,
            "summary": {risk: len(self.by_risk(risk)) for risk in ops.RISKS},
            "steps": [
                {**s.to_dict(), "fingerprint_after": f}
                for s, f in zip(self.steps, self.step_fingerprints, strict=True)
            ],
            "undeclared_tables": [attrs.asdict(u) for u in self.undeclared],
            "rewrites": [r.to_dict() for r in self.rewrites],
        }


def _key_signature(column: PrimaryKeyColumn) -> tuple[Any, ...]:
    return (column.name, column.type, column.auto_increment)


def _key_fields(table: Table) -> set[str]:
    """The fields a table's key is built from (a derived column's sources)."""
    return {f for c in table.primary_key for f in (c.derivation.sources if c.derivation else (c.name,))}


def routing_note(source: Table, target: Table) -> str:
    """What services on the model API must give during the rewrite of ``source`` into
    ``target``: its rows are routed to the other table (``tsmigrate.service.routing``), and a
    model whose key lacks a field of the other table's key cannot locate a row there by key alone."""
    needs = []
    for own, other, when in ((source, target, "after the switch"), (target, source, "until the switch")):
        missing = sorted(_key_fields(other) - _key_fields(own))
        if missing:
            needs.append(f"get, update and delete through the model of {own.name} need "
                         f"{', '.join(missing)} (not in its key) {when}, when {other.name} takes "
                         "the writes: give whole rows or their fields")
    return "; ".join(needs)


def key_change(live: Table, target: Table) -> str | None:
    """How the primary key changed, in words, or None when it did not."""
    before = [_key_signature(c) for c in live.primary_key]
    after = [_key_signature(c) for c in target.primary_key]
    if before != after:
        return (
            f"primary key ({', '.join(f'{c[0]} {c[1]}' for c in before)}) becomes "
            f"({', '.join(f'{c[0]} {c[1]}' for c in after)})"
        )
    for old, new in zip(live.primary_key, target.primary_key, strict=True):
        if old.derivation is not None and old.derivation != new.derivation:
            now = repr(new.derivation) if new.derivation else "a plain value"
            return f"key column {new.name} is derived differently ({old.derivation!r} -> {now})"
    return None


def with_known_derivations(live: Catalog, applied: Catalog | None) -> Catalog:
    """The live catalog with the key derivations tsmigrate applied last time, for tables whose
    key is still the one it applied (the service stores keys, not how they were derived)."""
    if applied is None:
        return live
    tables = []
    for table in live.tables:
        known = applied.table(table.name)
        if known is not None and [_key_signature(c) for c in known.primary_key] == [
            _key_signature(c) for c in table.primary_key
        ]:
            table = attrs.evolve(table, primary_key=known.primary_key)
        tables.append(table)
    return Catalog(tables=tables)


def recorded_catalog(models: Catalog, live: Catalog, dropped: Collection[str] = ()) -> Catalog:
    """What apply records as the catalog last applied: the models, plus the live tables no model
    declares (with the key derivations known for them: a table being rewritten keeps its own,
    which the rewrite needs and the service cannot report), less the tables ``dropped``."""
    declared = {t.name for t in models.tables}
    kept = [t for t in live.tables if t.name not in declared and t.name not in dropped]
    return Catalog(tables=[*models.tables, *kept])


def inspected(state: Catalog, recorded: Catalog) -> Catalog:
    """``state`` as ``tsmigrate inspect`` shows it once ``recorded`` is the catalog last applied:
    what the service stores, with the key derivations tsmigrate recorded."""
    return with_known_derivations(physical(state), recorded)


def _stream(spec: StreamSpec) -> StreamSpec:
    return spec if spec.enabled else StreamSpec()


def _secondary_signature(index: SecondaryIndex) -> tuple[Any, ...]:
    # include_base_data only matters when an index is created; the service does not report it.
    return (index.keys, index.include, index.type)


def _search_signature(index: SearchIndex) -> SearchIndex:
    return attrs.evolve(index, time_to_live=-1)


MAX_SEARCH_INDEX_NAME = 255  # the service's name rule: [A-Za-z_][A-Za-z0-9_]{0,254}


def reindex_blocker(table: Table, live: Table, index: SearchIndex) -> str | None:
    """Why the service cannot reindex ``index`` of ``table`` (None: it can). The rebuild is an
    index named ``<name>_reindex``, which must be a valid, free index name."""
    canary = index.name + "_reindex"
    if len(canary) > MAX_SEARCH_INDEX_NAME:
        return (f"its reindex index {canary[:40]}... would be longer than the "
                f"{MAX_SEARCH_INDEX_NAME} characters an index name may have")
    if any(i.name == canary for i in (*table.search_indexes, *live.search_indexes)):
        return f"the table has or declares another search index named {canary}, the name a reindex needs"
    return None


def _table_steps(live: Table, target: Table) -> list[ops.Step]:
    name = target.name
    early: list[ops.Step] = []  # drops, before options and columns change
    middle: list[ops.Step] = []
    late: list[ops.Step] = []  # creations, after their prerequisites hold

    live_search = {i.name: i for i in live.search_indexes}
    target_search = {i.name: i for i in target.search_indexes}
    search_ttls: list[ops.Step] = []
    for index_name, old in live_search.items():
        new = target_search.get(index_name)
        if new is None:
            early.append(ops.DropSearchIndex(name, old))
        elif _search_signature(old) != _search_signature(new):
            blocker = reindex_blocker(target, live, new)
            if blocker is not None:
                early.append(ops.DropSearchIndex(name, old, replaced=True, why=blocker))
                late.append(ops.CreateSearchIndex(name, new))
                continue
            # A TTL change goes in place first (ordered with the table's TTL), then the rebuild.
            if old.time_to_live != new.time_to_live:
                search_ttls.append(ops.UpdateSearchIndexTTL(name, index_name, old.time_to_live,
                                                            new.time_to_live))
            late.append(ops.ReindexSearchIndex(
                name, attrs.evolve(old, time_to_live=new.time_to_live), new))
        elif old.time_to_live != new.time_to_live:
            step = ops.UpdateSearchIndexTTL(name, index_name, old.time_to_live, new.time_to_live)
            search_ttls.append(step)
    for index_name, new in target_search.items():
        if index_name not in live_search:
            late.append(ops.CreateSearchIndex(name, new))

    live_sec = {i.name: i for i in live.secondary_indexes}
    target_sec = {i.name: i for i in target.secondary_indexes}
    creates: list[ops.Step] = []
    for index_name, old in live_sec.items():
        new = target_sec.get(index_name)
        if new is None:
            early.append(ops.DropIndex(name, old))
        elif _secondary_signature(old) != _secondary_signature(new):
            early.append(ops.DropIndex(name, old, replaced=True))
            creates.append(ops.CreateIndex(name, new))
    for index_name, new in target_sec.items():
        if index_name not in live_sec:
            creates.append(ops.CreateIndex(name, new))

    live_cols = {c.name: c for c in live.defined_columns}
    target_cols = {c.name: c for c in target.defined_columns}
    removed = [c for n, c in live_cols.items() if n not in target_cols or target_cols[n] != c]
    added = [c for n, c in target_cols.items() if n not in live_cols or live_cols[n] != c]
    if removed:
        early.append(ops.DeleteDefinedColumns(name, removed))

    middle.extend(_options_steps(name, live.options, target.options, search_ttls))
    if live.throughput != target.throughput:
        middle.append(ops.UpdateThroughput(name, live.throughput, target.throughput))
    if added:
        middle.append(ops.AddDefinedColumns(name, added))
    if _stream(live.stream) != _stream(target.stream):
        middle.append(ops.UpdateStream(name, _stream(live.stream), _stream(target.stream)))
    # Secondary indexes before search indexes: both are serialized and waited on by apply.
    return early + middle + creates + late


def _longer_ttl(a: int, b: int) -> int:
    return -1 if -1 in (a, b) else max(a, b)


def _options_steps(
    name: str, before: TableOptions, after: TableOptions, search_ttls: list[ops.Step]
) -> list[ops.Step]:
    """Options and search-index TTL changes in an order the service accepts at every step.

    A search index TTL must stay within the table's, and a TTL on the index or (with indexes) on
    the table needs updates disallowed. So the table first takes the longer TTL and disallows
    updates if either side does; then the index TTLs change; then the table takes its final
    options (a shorter TTL, updates allowed again).
    """
    between = TableOptions(
        time_to_live=_longer_ttl(before.time_to_live, after.time_to_live),
        max_versions=after.max_versions,
        max_time_deviation=after.max_time_deviation,
        allow_update=before.allow_update and after.allow_update,
    )
    steps: list[ops.Step] = []
    if between != before:
        steps.append(ops.UpdateOptions(name, before, between))
    steps.extend(search_ttls)
    if after != between:
        steps.append(ops.UpdateOptions(name, between, after))
    return steps


def _create_steps(table: Table) -> list[ops.Step]:
    bare = attrs.evolve(table, search_indexes=())
    steps: list[ops.Step] = [ops.CreateTable(table.name, bare)]
    steps += [ops.CreateSearchIndex(table.name, index) for index in table.search_indexes]
    return steps


def _drop_steps(table: Table) -> list[ops.Step]:
    # The service refuses to delete a table that still has a search index.
    steps: list[ops.Step] = [ops.DropSearchIndex(table.name, i) for i in table.search_indexes]
    return [*steps, ops.DropTable(table.name)]


def _names(catalog: Catalog) -> dict[str, str]:
    """Every name in the instance-wide namespace (tables and secondary indexes), described."""
    names = {}
    for table in catalog.tables:
        names[table.name] = f"table {table.name!r}"
        for index in table.secondary_indexes:
            names[index.name] = f"index {index.name!r} of table {table.name!r}"
    return names


def _free_name_fix(what: str, name: str, table: str, taken: Collection[str]) -> str:
    """How to rename a created table or index whose name is taken, with a free name."""
    if what == "table":
        return "declare the table under another name (table=...)"
    candidate = f"{table}_{name}"
    while candidate in taken:
        candidate += "_2"
    return f"give the index another name, e.g. name={candidate!r}"


def _table_objects(catalog: Catalog) -> int:
    return sum(1 + len(t.secondary_indexes) for t in catalog.tables)


def instance_problems(
    live: Catalog, target: Catalog, steps: list[ops.Step], bookkeeping: Collection[str] = ()
) -> list[Problem]:
    """What the service would refuse while running ``steps`` on ``live``: a created table or
    secondary index whose name is taken on the instance (tables and secondary indexes share one
    namespace), and more than 64 tables and index tables at any point. ``bookkeeping`` names the
    tables tsmigrate keeps on the instance besides the modelled ones (they count too)."""
    problems: list[Problem] = []
    state = physical(live)
    quota_reported = False
    created_by: dict[str, int] = {}  # names this plan creates, by step number
    for number, step in enumerate(steps, 1):
        taken = {**{n: f"tsmigrate's own table {n!r}" for n in bookkeeping}, **_names(state)}
        created: list[tuple[str, str]] = []  # (name, field)
        if isinstance(step, ops.CreateTable):
            created.append((step.table, "table"))
            created += [(i.name, f"index {i.name}") for i in step.definition.secondary_indexes]
        elif isinstance(step, ops.CreateIndex):
            created.append((step.index.name, f"index {step.index.name}"))
        model = target.table(step.table).source if target.table(step.table) else ""
        for name, field in created:
            if name not in taken:
                created_by.setdefault(name, number)
                continue
            what = "table" if field == "table" else "index"
            holder = (f"step {created_by[name]} of this plan creates {taken[name]}"
                      if name in created_by else f"the instance already has {taken[name]}")
            problems.append(Problem(
                table=step.table,
                field=field,
                rule="instance.name-taken",
                message=f"step {number} creates {what} {name!r}, but {holder}: tables and "
                "secondary indexes share one namespace in an instance, so the service would "
                "refuse it (OTSObjectAlreadyExist)",
                fix=_free_name_fix(what, name, step.table, {*taken, *created_by}),
                model=model,
            ))
        state = ops.transform(state, step)
        count = _table_objects(state) + len(bookkeeping)
        if count > MAX_TABLES_PER_INSTANCE and not quota_reported:
            quota_reported = True
            live_count = _table_objects(physical(live)) + len(bookkeeping)
            problems.append(Problem(
                table=step.table,
                field=created[0][1] if created else "",
                rule="instance.table-quota",
                message=f"step {number} ({step.summary()}) would make {count} tables and index "
                f"tables on the instance, which holds at most {MAX_TABLES_PER_INSTANCE} "
                f"(OTSQuotaExhausted); it holds {live_count} now, tsmigrate's own table included",
                fix="drop tables or indexes no service uses (plan --prune drops undeclared "
                "tables, after the creations), split the models across instances, or ask for a "
                "higher quota",
                model=model,
            ))
    return problems


def make_plan(
    live: Catalog,
    target: Catalog,
    *,
    prune: bool = False,
    bookkeeping: Collection[str] = (),
    finished_rewrites: Collection[str] = (),
    now: datetime | None = None,
) -> Plan:
    """The steps that take ``live`` to ``target``. Raises SchemaError for a change Tablestore
    cannot make: a primary key changed under the same table name, a name the instance already
    uses, more tables than the instance quota (``bookkeeping``: see ``instance_problems``); and
    RewriteShapeError (a SchemaError) for a rewrite whose two tables the copy, verification or
    cut-over cannot work with (``tsmigrate.contract.shapes.problems``).

    A table that a declared table ``replaces`` is never dropped, even when pruning, until its
    rewrite has finished: ``finished_rewrites`` names the replaced tables whose rewrite did
    (the rewrite engine records that in tsmigrate's state).

    A table family (a model with ``family=Monthly(...)``) plans its months as of ``now``
    (default: the current time): the coming months are created, expired ones retired."""
    declared = target
    families = expand_declared_families(target, live, now or datetime.now(timezone.utc))
    target = families.catalog
    live_tables = {t.name: t for t in live.tables}
    steps: list[ops.Step] = []
    problems: list[Problem] = []
    # What a rewrite and its cut-over need of the two tables (tsmigrate.contract.shapes)
    rewrite_problems: list[Problem] = []
    replaced_by = {t.replaces: t.name for t in target.tables if t.replaces}

    for table in target.tables:
        current = live_tables.get(table.name)
        if current is not None:
            change = key_change(current, table)
            if change is not None:
                problems.append(
                    Problem(
                        table=table.name,
                        field="primary_key",
                        rule="plan.key-change-in-place",
                        message=f"{change}, but Tablestore cannot change the primary key of an "
                        "existing table (nor rename a table)",
                        fix=f"declare the new key under a new table name with replaces={table.name!r}; "
                        "tsmigrate then rewrites the rows into it",
                        model=table.source,
                    )
                )
                continue
            steps.extend(_table_steps(current, table))
            continue
        steps.extend(_create_steps(table))
        source = live_tables.get(table.replaces) if table.replaces else None
        if source is not None:
            change = key_change(source, table) or "the table gets a new name"
            steps.append(ops.RewriteTable(table.name, source.name, change,
                                          routing=routing_note(source, table),
                                          revert=shapes.revert_problem(source, table) or ""))
            rewrite_problems += shapes.problems(source, table)
    if problems:
        raise SchemaError([*problems, *rewrite_problems])
    if rewrite_problems:
        raise shapes.RewriteShapeError(rewrite_problems)

    steps.extend(families.retire)
    undeclared = []
    declared_names = {t.name for t in target.tables} | {s.table for s in families.retire}
    for name, table in live_tables.items():
        if name in declared_names:
            continue
        if name in replaced_by and name not in finished_rewrites:
            note = (
                f"replaced by {replaced_by[name]}: kept, even with --prune, until its rewrite into "
                f"{replaced_by[name]} has finished; then drop it with --prune once services have "
                "cut over"
            )
            undeclared.append(Undeclared(name, note))
            continue
        if name in replaced_by and prune:  # the steps below drop it: no advice to pass --prune
            note = (f"replaced by {replaced_by[name]}, rewrite finished; dropped by this plan "
                    "(--prune): services must have cut over")
        elif name in replaced_by:
            note = (f"replaced by {replaced_by[name]}, rewrite finished; drop it with --prune once "
                    "services have cut over")
        else:
            note = "no model declares it" + ("; dropped by this plan (--prune)" if prune else "")
        undeclared.append(Undeclared(name, note))
        if prune:
            steps.extend(_drop_steps(table))

    problems = instance_problems(live, target, steps, bookkeeping)
    if problems:
        raise SchemaError(problems)

    # Fingerprints of the schema as inspection shows it once apply has recorded the models (it
    # does so before its first step), derivations included.
    recorded = recorded_catalog(declared, live)
    state = physical(live)
    chain = []
    for step in steps:
        state = ops.transform(state, step)
        chain.append(inspected(state, recorded).fingerprint())
    return Plan(
        steps=steps,
        undeclared=undeclared,
        source_fingerprint=inspected(live, recorded).fingerprint(),
        target_fingerprint=inspected(state, recorded).fingerprint(),
        models_fingerprint=declared.fingerprint(),
        step_fingerprints=chain,
    )
