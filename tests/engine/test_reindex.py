"""A changed search index is reindexed by apply: through the local server and the official SDK,
with searches and writes running throughout, the parity check blocking a switch, and a real kill
of `tsmigrate apply` at every stage followed by a rerun that resumes."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import tablestore as ts
from cliproject import CREDENTIALS, cli_process, run

from tsmigrate.instance import adapter
from tsmigrate.instance.apply import ApplyFailed, ApplyOptions, apply
from tsmigrate.reindex import checkpoint, parity
from tsmigrate.reindex.flow import ReindexSettings
from tsmigrate.schema import (
    AccessPattern,
    AttributeColumn,
    Catalog,
    PrimaryKeyColumn,
    SearchField,
    SearchIndex,
    Table,
)

IDENTITY = "local:test"
ROWS = 120

OLD = SearchIndex("finder", [SearchField("kind", "KEYWORD"), SearchField("tag", "KEYWORD"),
                             SearchField("n", "LONG", sort_and_agg=True)])
# A field added (title), another's type changed (tag: KEYWORD -> TEXT).
NEW = SearchIndex("finder", [SearchField("kind", "KEYWORD"), SearchField("tag", "TEXT"),
                             SearchField("n", "LONG", sort_and_agg=True),
                             SearchField("title", "TEXT")])
PATTERNS = [AccessPattern("by_kind", eq=["kind"]), AccessPattern("by_tag", eq=["tag"]),
            AccessPattern("recent", range="n", order_by="-n")]


def docs(index: SearchIndex, patterns=PATTERNS) -> Table:
    return Table("docs", [PrimaryKeyColumn("id", "STRING")], search_indexes=[index],
                 attributes=[AttributeColumn(n, t) for n, t in
                             (("kind", "STRING"), ("tag", "STRING"), ("n", "INTEGER"),
                              ("title", "STRING"))],
                 access_patterns=patterns)


def put(client, i: int) -> None:
    client.put_row("docs", ts.Row([("id", f"d{i:05d}")], [
        ("kind", f"k{i % 3}"), ("tag", f"t{i % 4}"), ("n", i), ("title", f"doc {i}")]))


def populate(client, count: int = ROWS) -> None:
    for i in range(count):
        put(client, i)


def live_search(client) -> list[str]:
    return [name for _t, name in client.list_search_index("docs")]


def total(client, query) -> int:
    return client.search("docs", "finder", ts.SearchQuery(query, limit=0, get_total_count=True),
                         ts.ColumnsToGet(return_type=ts.ColumnReturnType.NONE)).total_count


class Traffic:
    """Searches and writes on the index while apply runs: a search must never fail, and must
    find every row acknowledged before it started."""

    def __init__(self, client, first: int):
        self.client, self.next_id = client, first
        self.acked = first  # rows 0 .. acked-1 are written
        self.searches = self.failures = 0
        self.missed: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._write), threading.Thread(target=self._search)]

    def _write(self) -> None:
        while not self.stop.is_set():
            put(self.client, self.next_id)
            self.next_id += 1
            self.acked = self.next_id
            self.stop.wait(0.01)

    def _search(self) -> None:
        while not self.stop.is_set():
            before = self.acked
            try:
                everything = total(self.client, ts.MatchAllQuery())
                k1 = total(self.client, ts.TermQuery("kind", "k1"))
            except Exception as exc:
                self.failures += 1
                self.missed.append(f"search failed: {exc}")
                continue
            self.searches += 1
            if everything < before or k1 < len([i for i in range(before) if i % 3 == 1]):
                self.missed.append(f"{everything} rows (k1: {k1}) with {before} written")

    def __enter__(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()


@pytest.mark.slow  # every stage under live traffic, holds of 0.3 s at three weights
def test_reindex_with_searches_and_writes_running_throughout(ots_instance, ots_server_options):
    client = ots_instance.client()
    apply(client, Catalog([docs(OLD)]), target_identity=IDENTITY)
    populate(client)
    ots_instance.server.clock_offset += 60  # the index is past its own first full sync
    ots_server_options.search_full_sync_s = 3  # the rebuild takes a while, in FULL ...
    events: list[tuple[str, dict]] = []
    weights_seen: list[dict[str, int]] = []

    def report(event, data):
        events.append((event, data))
        if event == "build" and data["phase"] == "full":
            ots_instance.server.clock_offset += 0.5  # ... of the server's time, not the test's
        if event == "shift":
            described = adapter.RawClient(client).describe_search_index("docs", "finder")
            weights_seen.append({w.index_name: w.weight for w in described.query_flow_weight})

    # Each weight is held 0.3 s: long enough for many searches to land on both indexes.
    settings = ReindexSettings(weights=(10, 50, 100), hold_s=0.3, poll_s=0.1, report=report)
    with Traffic(client, ROWS) as traffic:
        outcome = apply(client, Catalog([docs(NEW)]), ApplyOptions(reindex=settings),
                        target_identity=IDENTITY)
    assert [s.kind for s in outcome.plan.steps] == ["reindex_search_index"]
    assert traffic.failures == 0 and traffic.missed == [], traffic.missed[:5]
    assert traffic.searches > 10
    stages = [d["stage"] for e, d in events if e == "stage"]
    assert stages == ["create", "build", "verify", "shift", "switch", "drop"]
    builds = [d for e, d in events if e == "build"]
    assert any(b["phase"] == "full" for b in builds) and builds[-1]["phase"] == "incremental"
    assert builds[-1]["indexed"] >= ROWS and builds[-1]["lag_s"] <= 5
    assert weights_seen == [{"finder": 90, "finder_reindex": 10}, {"finder": 50, "finder_reindex": 50},
                            {"finder": 0, "finder_reindex": 100}]
    checks = next(d["checks"] for e, d in events if e == "verified")
    assert any(c.startswith("every row:") for c in checks)
    assert any(c.startswith("by_tag: tag = 't0'") and "on both" in c for c in checks)
    # The new schema is live under the old name; the reindex index is gone.
    assert live_search(client) == ["finder"]
    assert adapter.inspect_table(client, "docs").search_indexes == (NEW,)
    assert total(client, ts.MatchPhraseQuery("title", "doc 7")) >= 1  # the added field
    assert total(client, ts.MatchAllQuery()) == traffic.acked
    assert checkpoint.load(client, "docs", "finder").stage == "done"
    again = apply(client, Catalog([docs(NEW)]), target_identity=IDENTITY)
    assert again.executed == 0 and again.reindexes == ()


def test_a_differing_query_blocks_the_switch_and_a_fixed_model_goes_through(ots_instance,
                                                                           monkeypatch):
    client = ots_instance.client()
    # The parity check looks again at a differing query after 1 s, in case the new index lags
    # behind writes; here the answers differ for good, so its looks follow one another at once.
    monkeypatch.setattr(parity, "time", SimpleNamespace(sleep=lambda seconds: None))
    apply(client, Catalog([docs(OLD)]), target_identity=IDENTITY)
    populate(client, 30)
    # n becomes DOUBLE: the rows hold integers, which a DOUBLE field cannot index.
    broken = SearchIndex("finder", [f if f.name != "n" else SearchField("n", "DOUBLE", sort_and_agg=True)
                                    for f in NEW.fields])
    with pytest.raises(ApplyFailed) as failed:
        apply(client, Catalog([docs(broken)]), ApplyOptions(reindex=ReindexSettings(poll_s=0.05)),
              target_identity=IDENTITY)
    message = str(failed.value)
    assert "the switch is blocked" in message and "recent: n >= " in message
    assert "rows on the old index, 0 on the new" in message
    assert checkpoint.load(client, "docs", "finder").stage == "verify"
    assert adapter.inspect_table(client, "docs").search_indexes == (OLD,)  # still serving
    assert sorted(live_search(client)) == ["finder", "finder_reindex"]

    outcome = apply(client, Catalog([docs(NEW)]), ApplyOptions(reindex=ReindexSettings(poll_s=0.05)),
                    target_identity=IDENTITY)
    assert [r.stage for r in outcome.reindexes] == ["done"]
    assert adapter.inspect_table(client, "docs").search_indexes == (NEW,)
    assert live_search(client) == ["finder"]


def test_an_unwanted_reindex_left_before_its_switch_is_abandoned(ots_instance):
    client = ots_instance.client()
    apply(client, Catalog([docs(OLD)]), target_identity=IDENTITY)
    broken = SearchIndex("finder", [SearchField("kind", "LONG")])  # kind holds strings
    with pytest.raises(ApplyFailed):
        populate(client, 5)
        apply(client, Catalog([docs(broken, patterns=[PATTERNS[0]])]),
              ApplyOptions(reindex=ReindexSettings(poll_s=0.05)), target_identity=IDENTITY)
    outcome = apply(client, Catalog([docs(OLD)]), target_identity=IDENTITY)  # back to the old
    assert outcome.executed == 0
    assert live_search(client) == ["finder"]
    assert checkpoint.load(client, "docs", "finder").stage == "done"


# --- the CLI, killed at every stage --------------------------------------------------------------

MODEL = """
from tsmigrate import AccessPattern, Column, Model, PrimaryKey, SearchField, SearchIndex


class Doc(Model, table="docs"):
    id = PrimaryKey(str)
    kind = Column(str)
    tag = Column(str)
    n = Column(int)
    title = Column(str)
    finder = SearchIndex(fields=[{fields}])
    by_kind = AccessPattern(eq=["kind"])
    by_tag = AccessPattern(eq=["tag"])
"""
OLD_FIELDS = "SearchField('kind', 'keyword'), SearchField('tag', 'keyword'), SearchField('n', 'long')"
NEW_FIELDS = ("SearchField('kind', 'keyword'), SearchField('tag', 'text'), "
              "SearchField('n', 'long'), SearchField('title', 'text')")


HOUR_S = 3600
HOLD_S = 0.25  # each weight's hold: long enough for a kill in the shift stage to land in it


def _project(root: Path, fields: str) -> Path:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(MODEL.format(fields=fields))
    return root


@pytest.mark.parametrize("stage", ["create", "build", "verify", "shift", "switch", "drop"])
@pytest.mark.slow
def test_cli_killed_at_each_stage_resumes_there(stage, tmp_path, ots_instance, ots_server_options):
    client = ots_instance.client()
    target = ["--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance]
    apply(client, Catalog([docs(OLD, patterns=PATTERNS[:2])]), target_identity=IDENTITY)
    populate(client, 40)
    proj = _project(tmp_path, NEW_FIELDS)
    ots_instance.server.clock_offset += 60  # the index is past its own first full sync
    # Killed at create or build, the rebuild lasts until the server's clock moves (it never does
    # while the apply runs): the kill lands before the build ends. Killed later, the rebuild is
    # done at the first look, instead of after seconds of the apply's 1 s polls.
    ots_server_options.search_full_sync_s = HOUR_S if stage in ("create", "build") else 0.0
    victim = cli_process(proj, "apply", "--yes", "--reindex-weights", "50,100",
                         "--reindex-hold", str(HOLD_S), *target, extra_env=CREDENTIALS)
    seen = []
    try:
        while True:
            line = victim.stderr.readline()
            assert line, f"apply ended before stage {stage}: {seen}"
            seen.append(line)
            if f"reindex docs.finder: stage {stage}:" in line:
                break
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
    finally:
        victim.kill()
        victim.stderr.close()
    left = checkpoint.load(client, "docs", "finder")
    assert left is not None
    assert checkpoint.STAGES.index(left.stage) >= checkpoint.STAGES.index(stage)
    ots_server_options.search_full_sync_s = 0.0  # a rebuild left unfinished is done at once
    rerun = run(proj, "apply", "--yes", *target, extra_env=CREDENTIALS)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    if left.active:
        assert f"reindex docs.finder: stage {left.stage}:" in rerun.stderr
        assert "(resumed at this stage)" in rerun.stderr
    # kept for the resume (the rerun gives neither)
    assert (left.weights, left.hold_s) == ((50, 100), HOLD_S)
    assert "for 60 s" not in rerun.stderr  # the default hold would apply, were it not kept
    assert checkpoint.load(client, "docs", "finder").stage == "done"
    assert live_search(client) == ["finder"]
    fields = adapter.inspect_table(client, "docs").search_indexes[0].fields
    assert [(f.name, f.type) for f in fields] == [
        ("kind", "KEYWORD"), ("n", "LONG"), ("tag", "TEXT"), ("title", "TEXT")]


@pytest.mark.slow
def test_cli_plan_shows_the_reindex_in_every_format_and_weights_are_checked(tmp_path, ots_instance):
    target = ["--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance]
    proj = _project(tmp_path, OLD_FIELDS)
    assert run(proj, "apply", "--yes", *target, extra_env=CREDENTIALS).returncode == 0
    _project(tmp_path, NEW_FIELDS)
    text = run(proj, "plan", *target, extra_env=CREDENTIALS)
    assert text.returncode == 0, text.stderr
    assert "~  1. reindex search index finder of docs  [data-copy]" in text.stdout
    assert "field title added (text); field tag: KEYWORD -> TEXT." in text.stdout
    markdown = run(proj, "plan", "--format", "markdown", *target, extra_env=CREDENTIALS)
    assert "| 1 | `~` | reindex search index finder of docs | **data-copy** | field title added" \
        in markdown.stdout
    data = json.loads(run(proj, "plan", "--format", "json", *target, extra_env=CREDENTIALS).stdout)
    [step] = data["steps"]
    assert (step["kind"], step["risk"]) == ("reindex_search_index", "data-copy")
    assert "finder keeps serving searches" in step["reason"]
    for bad in ("50,10", "0,100", "ten"):
        refused = run(proj, "apply", "--yes", "--reindex-weights", bad, *target,
                      extra_env=CREDENTIALS)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert "--reindex-weights" in refused.stdout + refused.stderr
    assert live_search(ots_instance.client()) == ["finder"]  # nothing was started
    done = run(proj, "apply", "--yes", "--format", "json", *target, extra_env=CREDENTIALS)
    result = json.loads(done.stdout)
    assert result["outcome"] == "applied" and result["reindexes"] == [
        {"table": "docs", "index": "finder", "stage": "done"}]
    assert "reindex docs.finder: stage switch" in done.stderr


def test_a_reindex_waits_for_a_free_rebuild_slot(ots_instance, ots_server_options):
    """The instance rebuilds at most five search indexes at once: a sixth waits, saying so."""
    client = ots_instance.client()
    others = [Table(f"o{i}", [PrimaryKeyColumn("id", "STRING")],
                    search_indexes=[SearchIndex("s", [SearchField("a", "KEYWORD")])])
              for i in range(5)]
    apply(client, Catalog([docs(OLD), *others]), target_identity=IDENTITY)
    ots_instance.server.clock_offset += 5000  # the indexes are past their own first full sync
    ots_server_options.search_full_sync_s = 1000  # rebuilds last until the clock moves
    raw = adapter.RawClient(client)
    schema = adapter.search_schema_bytes(client, "o0", SearchIndex("s", [SearchField("b", "LONG")]))
    for other in others:
        raw.create_search_index_from(other.name, "s_reindex", "s", schema)
    seen: list[str] = []

    def report(event, data):
        if event == "wait" and "free rebuild slot" in data["what"] and not seen:
            seen.append(data["what"])
            ots_instance.server.clock_offset += 2000  # the other rebuilds catch up
        if event == "build" and data["phase"] == "full":
            ots_instance.server.clock_offset += 2000  # and so does this one

    apply(client, Catalog([docs(NEW), *others]),
          ApplyOptions(reindex=ReindexSettings(poll_s=0.05, report=report)), target_identity=IDENTITY)
    assert "at most 5 search indexes at once" in seen[0] and "limit: 5" in seen[0]
    assert adapter.inspect_table(client, "docs").search_indexes == (NEW,)
