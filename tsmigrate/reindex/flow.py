"""Run a search-index reindex, stage by stage, from its checkpoint (Tablestore's dynamic schema
modification).

- create: ``<index>_reindex`` is created from ``<index>`` with the new schema (the service's
  limit of five rebuilds at once is waited out);
- build: wait for its full sync (rows indexed of the table's rows) and for the incremental sync
  to catch up (lag);
- verify: the access patterns run on both indexes and must answer alike (``parity``);
- shift: optional query traffic weights, each held for a while (``--reindex-weights``);
- switch: the two swap schemas, so ``<index>`` serves the new schema under its own name;
- drop: the canary, which now holds the old schema, is deleted.

Every stage can run again after a kill: create finds the canary it made, the weights are set
again, the switch looks whether the index already serves the new schema before it switches (a
second switch would swap back), drop deletes only what exists. Searches on ``<index>`` never
fail meanwhile: it keeps serving its old schema until the switch, which is one call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs
import tablestore as ts

from tsmigrate.errors import TsmigrateError
from tsmigrate.instance import adapter
from tsmigrate.instance.rawclient import RawClient
from tsmigrate.planning import ops
from tsmigrate.reindex import checkpoint as cpt
from tsmigrate.reindex import parity
from tsmigrate.reindex.checkpoint import Checkpoint
from tsmigrate.schema import SearchIndex, Table

Report = Callable[[str, dict[str, Any]], None]


def quiet(event: str, data: dict[str, Any]) -> None:
    """A report that shows nothing."""


@attrs.frozen
class ReindexSettings:
    """How apply runs reindex steps. ``weights``: the percentages of query traffic the new
    index gets, in turn, before the switch, each held ``hold_s`` seconds. Caught up means in
    incremental sync with the sync point at most ``max_lag_s`` behind."""

    weights: tuple[int, ...] = attrs.field(default=(), converter=tuple)
    hold_s: float = cpt.DEFAULT_HOLD_S
    max_lag_s: float = 5.0
    poll_s: float = 1.0
    timeout_s: float = 24 * 3600.0  # a build that makes no progress this long fails the stage
    report: Report = quiet


def parse_weights(text: str) -> tuple[int, ...]:
    """``"10,50,100"`` -> (10, 50, 100): rising percentages in 1..100."""
    try:
        weights = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise TsmigrateError(f"--reindex-weights {text!r}: give rising percentages such as "
                             "10,50,100") from None
    if not weights or any(not 1 <= w <= 100 for w in weights) or list(weights) != sorted(set(weights)):
        raise TsmigrateError(f"--reindex-weights {text!r}: each weight is a percentage from 1 to "
                             "100, rising (e.g. 10,50,100)")
    return weights


class ReindexFailed(TsmigrateError):
    """A stage cannot complete; the checkpoint keeps the stage, so apply resumes there."""


def same_schema(a: SearchIndex, b: SearchIndex) -> bool:
    return attrs.evolve(a, name=b.name) == b


@attrs.define
class _Run:
    client: Any
    table: Table  # the declared table (its access patterns)
    settings: ReindexSettings
    check: Callable[[], None]  # raises to stop (apply's lease was lost)

    @property
    def raw(self) -> RawClient:
        return RawClient(self.client)

    def report(self, event: str, checkpoint: Checkpoint, **data: Any) -> None:
        self.settings.report(event, {"table": checkpoint.table, "index": checkpoint.index, **data})

    def describe(self, name: str) -> Any | None:
        try:
            return self.raw.describe_search_index(self.table.name, name)
        except ts.OTSServiceError as exc:
            if exc.code == "OTSMetaNotMatch":
                return None
            raise

    def wait(self, checkpoint: Checkpoint, what: str, started: float) -> None:
        self.check()
        self.report("wait", checkpoint, what=what, elapsed_s=time.monotonic() - started)
        time.sleep(self.settings.poll_s)

    # -- stages -----------------------------------------------------------------------------

    def create(self, cp: Checkpoint) -> Checkpoint:
        existing = self.describe(cp.reindex)
        if existing is not None:
            if existing.brother_index_name != cp.index:
                raise ReindexFailed(
                    f"search index {cp.reindex} of {cp.table} exists and is not a reindex of "
                    f"{cp.index}; rename or delete it, then apply again")
            return cp.at(cpt.BUILD)  # made by the run that was killed
        schema = adapter.search_schema_bytes(self.client, cp.table, cp.after)
        started = time.monotonic()
        while True:
            try:
                self.raw.create_search_index_from(cp.table, cp.reindex, cp.index, schema,
                                                  cp.after.time_to_live)
                return cp.at(cpt.BUILD)
            except ts.OTSServiceError as exc:
                if exc.code != "OTSQuotaExhausted":
                    raise
                self.wait(cp, "a free rebuild slot (the instance rebuilds at most 5 search "
                          f"indexes at once: {exc.message})", started)

    def build(self, cp: Checkpoint) -> Checkpoint:
        started = last_progress = time.monotonic()
        best = -1
        while True:
            canary, source = self.describe(cp.reindex), self.describe(cp.index)
            if canary is None or source is None:
                raise ReindexFailed(f"search index {cp.reindex if canary is None else cp.index} "
                                    f"of {cp.table} disappeared during the rebuild; apply again "
                                    "starts the reindex anew")
            indexed = canary.metering_info.row_count if canary.HasField("metering_info") else 0
            total = source.metering_info.row_count if source.HasField("metering_info") else 0
            full = canary.sync_stat.sync_phase == 1  # search_pb2.FULL
            lag_s = max(0.0, time.time() - canary.sync_stat.current_sync_timestamp / 1e9)
            self.report("build", cp, phase="full" if full else "incremental", indexed=indexed,
                        total=total, lag_s=lag_s, elapsed_s=time.monotonic() - started)
            if not full and lag_s <= self.settings.max_lag_s:
                return cp.at(cpt.VERIFY)
            if indexed > best:
                best, last_progress = indexed, time.monotonic()
            elif time.monotonic() - last_progress > self.settings.timeout_s:
                raise ReindexFailed(f"{cp.reindex} made no progress for "
                                    f"{self.settings.timeout_s:.0f} s")
            self.check()
            time.sleep(self.settings.poll_s)

    def verify(self, cp: Checkpoint) -> Checkpoint:
        checks = parity.check(self.client, self.table, cp.before, cp.index, cp.after, cp.reindex)
        self.report("verified", cp, checks=[c.text() for c in checks])
        return cp.at(cpt.SHIFT)

    def shift(self, cp: Checkpoint) -> Checkpoint:
        for number in range(cp.weights_done, len(cp.weights)):
            weight = cp.weights[number]
            self.raw.set_query_flow_weights(cp.table, cp.index,
                                            {cp.index: 100 - weight, cp.reindex: weight})
            cp = cp.at(cpt.SHIFT, weights_done=number + 1)
            cpt.save(self.client, cp)
            self.report("shift", cp, weight=weight)
            held = time.monotonic()
            while time.monotonic() - held < cp.hold_s:
                self.check()
                self.report("hold", cp, weight=weight, elapsed_s=time.monotonic() - held,
                            hold_s=cp.hold_s)
                time.sleep(min(self.settings.poll_s, cp.hold_s))
        return cp.at(cpt.SWITCH)

    def switch(self, cp: Checkpoint) -> Checkpoint:
        live = self._live_index(cp)
        if live is not None and same_schema(live, cp.after) and not same_schema(live, cp.before):
            return cp.at(cpt.DROP)  # the killed run's switch landed; a second would swap back
        if cp.weights:
            # All traffic back on the source first: whatever the service does with weights at
            # the switch, no query can then reach the canary once it holds the old schema.
            self.raw.set_query_flow_weights(cp.table, cp.index, {cp.index: 100, cp.reindex: 0})
        self.raw.switch_search_index(cp.table, cp.index, cp.reindex)
        return cp.at(cpt.DROP)

    def drop(self, cp: Checkpoint) -> Checkpoint:
        if self.describe(cp.reindex) is not None:
            try:
                self.client.delete_search_index(cp.table, cp.reindex)
            except ts.OTSServiceError as exc:
                if exc.code != "OTSMetaNotMatch":
                    raise
        started = time.monotonic()
        while self.describe(cp.reindex) is not None:
            self.wait(cp, f"search index {cp.reindex} to be dropped", started)
        return cp.at(cpt.DONE)

    def _live_index(self, cp: Checkpoint) -> SearchIndex | None:
        table = adapter.inspect_table(self.client, cp.table)
        return next((i for i in table.search_indexes if i.name == cp.index), None)

    def abandon(self, cp: Checkpoint) -> None:
        """Give up a reindex that has not switched: the source keeps serving as it was."""
        if self.describe(cp.reindex) is not None:
            self.client.delete_search_index(cp.table, cp.reindex)
        cpt.save(self.client, cp.at(cpt.DONE))


_STAGES: dict[str, Callable[[_Run, Checkpoint], Checkpoint]] = {
    cpt.CREATE: _Run.create, cpt.BUILD: _Run.build, cpt.VERIFY: _Run.verify,
    cpt.SHIFT: _Run.shift, cpt.SWITCH: _Run.switch, cpt.DROP: _Run.drop,
}


def run(client: Any, table: Table, cp: Checkpoint, settings: ReindexSettings,
        check: Callable[[], None] = lambda: None, *, resumed: bool = False) -> Checkpoint:
    """Take ``cp`` through its remaining stages; every stage done is saved before the next."""
    runner = _Run(client, table, settings, check)
    while cp.active:
        runner.report("stage", cp, stage=cp.stage, resumed=resumed)
        resumed = False
        cp = _STAGES[cp.stage](runner, cp)
        cpt.save(client, cp)
    runner.report("done", cp)
    return cp


def start(client: Any, table: Table, step: ops.ReindexSearchIndex, settings: ReindexSettings,
          check: Callable[[], None] = lambda: None) -> Checkpoint:
    """Run the reindex ``step`` plans, resuming the checkpoint a killed run left for it."""
    runner = _Run(client, table, settings, check)
    earlier = cpt.load(client, step.table, step.index.name)
    if earlier is not None and earlier.active:
        if earlier.after == step.index:
            return run(client, table, earlier, settings, check, resumed=True)
        if cpt.STAGES.index(earlier.stage) >= cpt.STAGES.index(cpt.SWITCH):
            run(client, table, earlier, settings, check, resumed=True)
        else:  # the models changed again before the switch: start over from the source
            runner.abandon(earlier)
    now = cpt._now_ms()
    fresh = Checkpoint(step.table, step.index.name, cpt.CREATE, step.before, step.index,
                       settings.weights, 0, now, now, settings.hold_s)
    cpt.save(client, fresh)
    return run(client, table, fresh, settings, check)


def continue_unfinished(client: Any, tables: dict[str, Table], settings: ReindexSettings,
                        check: Callable[[], None] = lambda: None) -> list[Checkpoint]:
    """After the plan's steps: finish the reindexes a killed apply left past their switch (the
    plan shows nothing for them: the index has its new schema already), and give up those left
    before it that no step took up (the models no longer ask for that schema), deleting their
    canary. Reindexes of tables the models do not declare are left alone."""
    finished = []
    for cp in cpt.unfinished(client):
        table = tables.get(cp.table)
        if table is None:
            continue
        if cpt.STAGES.index(cp.stage) >= cpt.STAGES.index(cpt.SWITCH):
            finished.append(run(client, table, cp, settings, check, resumed=True))
        else:
            _Run(client, table, settings, check).abandon(cp)
            settings.report("abandoned", {"table": cp.table, "index": cp.index, "stage": cp.stage})
    return finished
