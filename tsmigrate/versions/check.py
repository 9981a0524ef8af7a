"""Replaying every revision offline, for `tsmigrate check`: each upgrade must run against the
schema its ancestors leave and give a schema the service accepts, and each downgrade must give
back its parent's schema (or refuse with ``op.irreversible``)."""

from __future__ import annotations

import attrs

from tsmigrate.planning import ops
from tsmigrate.planning.plan import Plan, make_plan
from tsmigrate.schema import Catalog
from tsmigrate.schema.model import registered_models
from tsmigrate.versions.errors import IrreversibleError, MigrationError
from tsmigrate.versions.op import TransformedRewrite, next_catalog
from tsmigrate.versions.replay import Collected, check_valid, collect
from tsmigrate.versions.scripts import ScriptDirectory


@attrs.frozen
class ReplayResult:
    problems: tuple[str, ...]
    # (revision, its Steps as a Plan, schema before, schema after), for linting each revision.
    plans: tuple[tuple[str, Plan, Catalog, Catalog], ...]
    head: Catalog | None  # the single head's schema, when it and its ancestors replay


def _plan(collected: Collected) -> Plan:
    steps = [o.step if isinstance(o, TransformedRewrite) else o for o in collected.operations
             if isinstance(o, (ops.Step, TransformedRewrite))]
    state, fingerprints = collected.catalog_before, []
    for step in steps:
        state = next_catalog(state, step)
        fingerprints.append(state.fingerprint())
    return Plan(steps=steps, undeclared=(), source_fingerprint=collected.catalog_before.fingerprint(),
                target_fingerprint=state.fingerprint(), step_fingerprints=fingerprints)


@attrs.frozen
class Versioned:
    """The models and a replayed schema as revisions capture them: without table families,
    whose month tables depend on the date (apply plans them), so that next month's table is
    never "a change no revision captures"."""

    models: Catalog
    schema: Catalog
    families: tuple[str, ...]


def without_families(models: Catalog, schema: Catalog) -> Versioned:
    family_models = {m._qualname(): m for m in registered_models() if m.table_family() is not None}
    families = {t.name: family_models[t.source] for t in models.tables if t.source in family_models}

    def month_table(name: str) -> bool:
        return any(m.table_family().month_of_table(template, name) is not None  # type: ignore[union-attr]
                   for template, m in families.items())

    return Versioned(
        models=Catalog(tables=[t for t in models.tables if t.name not in families]),
        schema=Catalog(tables=[t for t in schema.tables
                               if t.name not in families and not month_table(t.name)]),
        families=tuple(sorted(families)),
    )


def same_schema(a: Catalog, b: Catalog) -> bool:
    """What the service stores, and the key derivations, are the same."""
    keys = {t.name: t.primary_key for t in a.tables} == {t.name: t.primary_key for t in b.tables}
    return keys and make_plan(a, b, prune=True).steps == ()


def replay_all(directory: ScriptDirectory) -> ReplayResult:
    graph = directory.graph
    after: dict[str, Catalog] = {}
    problems: list[str] = []
    plans = []
    for rev in graph.topological():
        parents = graph.parents(rev)
        if any(p not in after for p in parents):
            continue  # an ancestor failed, already reported
        script = directory.scripts[rev]
        try:
            if len(parents) <= 1:
                before = after[parents[0]] if parents else Catalog()
            else:  # a merge: the schema after both branches, replayed in graph order
                before = Catalog()
                for ancestor in graph.upgrade_path((), rev)[:-1]:
                    before = collect(directory.scripts[ancestor], "upgrade", before).catalog_after
            up = collect(script, "upgrade", before)
            check_valid(up)
        except MigrationError as exc:
            problems.append(str(exc))
            continue
        after[rev] = up.catalog_after
        plans.append((rev, _plan(up), before, up.catalog_after))
        try:
            down = collect(script, "downgrade", up.catalog_after)
        except IrreversibleError:
            continue  # refusing, with a reason, is a valid downgrade
        except MigrationError as exc:
            problems.append(str(exc))
            continue
        if not same_schema(down.catalog_after, before):
            left = make_plan(down.catalog_after, before, prune=True).steps
            detail = "; ".join(s.summary() for s in left) or "the key derivations differ"
            problems.append(f"revision {rev} ({script.path}) downgrade() does not give back its "
                            f"parent's schema: still to undo: {detail}")
    heads = graph.heads
    head = after.get(heads[0]) if len(heads) == 1 else (Catalog() if not heads else None)
    return ReplayResult(tuple(problems), tuple(plans), head)
