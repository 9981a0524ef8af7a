"""Rewrite steps inside ``apply``: start a planned ``rewrite_table`` step, continue rewrites a
crash left unfinished, and keep what prepare changed on the tables out of the plan.

A rewrite is a long job, so ``apply`` does not re-plan it after a crash: the rewrite row in
``tsmigrate_state`` says where it was, and ``apply`` continues it from there (``pending``).
``upcoming`` tells the same without changing anything, so ``plan`` shows what apply will run.
While a rewrite is unfinished, the target's widened ``max_time_deviation`` and the source's
stream (turned on by prepare) are the rewrite's business, not schema changes to plan
(``mask_live``); finish and abort put them back.
"""

from __future__ import annotations

import uuid
from typing import Any

import attrs

from tsmigrate.contract import shapes
from tsmigrate.planning import ops
from tsmigrate.planning.plan import RewriteAhead
from tsmigrate.rewrite import driver, machine, prepare
from tsmigrate.rewrite.job import ConnectionSpec, RewriteJob
from tsmigrate.schema import Catalog, StreamSpec


@attrs.frozen
class RewriteSettings:
    """How apply runs rewrite steps. ``spec=None``: workers reach the instance the way apply's
    client does, with the local server's default credentials (tests, the embedded instance)."""

    spec: ConnectionSpec | None = None
    options: driver.RunOptions = attrs.field(factory=driver.RunOptions)
    report: driver.Report = driver.quiet

    def spec_for(self, client: Any) -> ConnectionSpec:
        return self.spec or driver.spec_of(client, local_defaults=True)


def mask_live(client: Any, live: Catalog) -> Catalog:
    """The live catalog as the plan should see it: tables under an unfinished rewrite with the
    deviation and streams they had before the rewrite changed them."""
    changes: dict[str, list[Any]] = {}
    for rewrite in machine.all_rewrites(client):
        if not rewrite.active:
            continue
        # The deviations prepare (target) and switch (source, for reverse capture) widened.
        for table, key in ((rewrite.target, "declared_deviation"),
                           (rewrite.source, "source_declared_deviation")):
            declared = rewrite.get(key)
            if declared is not None:
                changes.setdefault(table, []).append(lambda t, d=declared: attrs.evolve(
                    t, options=attrs.evolve(t.options, max_time_deviation=int(d))))
        # The streams prepare (source) and switch (target, for reverse capture) turned on.
        for table, key in ((rewrite.source, "stream_was"), (rewrite.target, "target_stream_was")):
            was = rewrite.get(key)
            if was is not None:
                spec = StreamSpec(bool(was["enabled"]), int(was.get("expiration_hours") or 24))
                changes.setdefault(table, []).append(lambda t, s=spec: attrs.evolve(t, stream=s))
    if not changes:
        return live
    tables = []
    for table in live.tables:
        for change in changes.get(table.name, ()):
            table = change(table)
        tables.append(table)
    return Catalog(tables=tables)


def _job(live: Catalog, models: Catalog, source: str, target: str,
         custom: str | None = None) -> RewriteJob:
    source_table = live.table(source)
    target_table = models.table(target)
    assert source_table is not None and target_table is not None
    return RewriteJob(id=uuid.uuid4().hex[:16], source=source_table, target=target_table,
                      custom=custom)


def start(client: Any, live: Catalog, models: Catalog, step: ops.RewriteTable,
          custom: str | None = None) -> machine.Rewrite:
    """Start the rewrite ``step`` plans; ``custom``: a key transform's reference
    (``tsmigrate.contract.functions``) for keys no derivation expresses."""
    job = _job(live, models, step.source, step.table, custom)
    return machine.start(client, source=step.source, target=step.table,
                         doc={"job": job.to_json(), "key_change": step.key_change})


def upcoming(client: Any, live: Catalog, models: Catalog) -> list[RewriteAhead]:
    """The rewrites apply will start or continue besides its plan's steps (read calls only, so
    ``plan`` shows them too): unfinished ones of declared tables (not paused: resume does that;
    not ready or finishing: ``rewrite finish`` does that), and declared replacements whose
    target exists without one (started by apply, when the target is empty)."""
    rewrites = {r.target: r for r in machine.all_rewrites(client)}
    out = []
    for table in models.tables:
        rewrite = rewrites.get(table.name)
        if rewrite is not None and rewrite.active:
            if rewrite.phase not in (machine.READY, *machine.CUT_OVER, machine.FINISHING, machine.PAUSED):
                out.append(_continued(rewrite))
            continue
        if rewrite is not None and rewrite.phase == machine.DONE:
            continue
        if table.replaces and live.table(table.replaces) and live.table(table.name):
            target = live.table(table.name)
            assert target is not None
            # What plan checks of a rewrite step, for one apply starts without a step (the
            # declared options: the plan's steps bring the table to them before the rewrite).
            shapes.check(live.table(table.replaces), table)  # type: ignore[arg-type]
            if prepare.target_has_rows(client, table.name, target.primary_key_names):
                raise prepare.TargetNotEmpty(
                    f"table {table.name} already exists with rows that no rewrite of "
                    f"{table.replaces} wrote, so tsmigrate will not rewrite {table.replaces} into "
                    f"it; drop {table.name} (or declare another table name) and apply again"
                )
            out.append(RewriteAhead(table.name, table.replaces))
    return out


def _continued(rewrite: machine.Rewrite) -> RewriteAhead:
    if rewrite.phase == machine.FAILED:
        note = f"it failed: {rewrite.error}" if rewrite.error else "it failed"
        return RewriteAhead(rewrite.target, rewrite.source, rewrite.resume_to or rewrite.phase, note)
    return RewriteAhead(rewrite.target, rewrite.source, rewrite.phase)


def pending(
    client: Any, live: Catalog, models: Catalog, ahead: list[RewriteAhead] | None = None
) -> list[machine.Rewrite]:
    """Start or take the rewrites of ``upcoming`` (those given: what the plan showed)."""
    out = []
    for item in upcoming(client, live, models) if ahead is None else ahead:
        if item.phase is None:
            step = ops.RewriteTable(item.table, item.source, "the table gets a new name")
            out.append(start(client, live, models, step))
        else:
            rewrite = machine.load(client, item.table)
            assert rewrite is not None
            out.append(rewrite)
    return out


def run(client: Any, target: str, settings: RewriteSettings) -> machine.Rewrite:
    """Take the rewrite into ``target`` to ready (or raise, leaving it failed with why); the
    report also tells whether capture keeps up with the source's writes, as prepare found."""
    from tsmigrate.rewrite import capacity

    with machine.Runner(client, target) as runner:
        return driver.run_to_ready(client, settings.spec_for(client), runner, settings.options,
                                   capacity.announcing(runner, settings.report))
