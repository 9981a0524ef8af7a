"""Diff and plan: pure functions of IR values."""

from __future__ import annotations

import json

import pytest
from samples import DAY, events

from tsmigrate.errors import SchemaError
from tsmigrate.keys import HashPrefix
from tsmigrate.planning import ops
from tsmigrate.planning.plan import make_plan
from tsmigrate.planning.planrender import plan_json, plan_markdown, plan_text
from tsmigrate.schema import (
    Catalog,
    DefinedColumn,
    PrimaryKeyColumn,
    ReservedThroughput,
    SearchField,
    SearchIndex,
    SecondaryIndex,
    StreamSpec,
    TableOptions,
)


def _kinds(plan) -> list[str]:
    return [s.kind for s in plan.steps]


def test_empty_instance_creates_tables_then_search_indexes():
    plan = make_plan(Catalog(), Catalog([events()]))
    assert _kinds(plan) == ["create_table", "create_search_index"]
    create = plan.steps[0]
    assert create.definition.secondary_indexes[0].name == "events_by_user"
    assert create.definition.search_indexes == ()
    assert all(s.risk == ops.SAFE for s in plan.steps)


def test_same_catalog_has_no_changes():
    catalog = Catalog([events()])
    plan = make_plan(catalog, catalog)
    assert not plan.has_changes
    assert plan.source_fingerprint == plan.target_fingerprint


def test_declared_only_parts_never_make_steps():
    live = Catalog([events()])
    target = Catalog([events(access_patterns=(), source="models.x.Events")])
    assert not make_plan(live, target).has_changes


def test_lowering_ttl_is_destructive_and_orders_index_ttl_first():
    live = Catalog([events()])
    target = Catalog([
        events(
            options=TableOptions(time_to_live=7 * DAY, allow_update=False),
            search_indexes=[SearchIndex("events_search",
                                        [SearchField("score", "LONG", sort_and_agg=True)],
                                        time_to_live=7 * DAY)],
        )
    ])
    plan = make_plan(live, target)
    assert _kinds(plan) == ["update_search_index_ttl", "update_options"]
    assert all(s.risk == ops.DESTRUCTIVE for s in plan.steps)
    assert "lowering TTL from 30d to 7d deletes cells older than 7d" in plan.steps[1].reason


def test_raising_ttl_orders_table_first_and_is_safe():
    live = Catalog([events()])
    target = Catalog([
        events(
            options=TableOptions(time_to_live=60 * DAY, allow_update=False),
            search_indexes=[SearchIndex("events_search",
                                        [SearchField("score", "LONG", sort_and_agg=True)],
                                        time_to_live=60 * DAY)],
        )
    ])
    plan = make_plan(live, target)
    assert _kinds(plan) == ["update_options", "update_search_index_ttl"]
    assert all(s.risk == ops.SAFE for s in plan.steps)


def test_max_versions_risks():
    live = Catalog([events(secondary_indexes=(), search_indexes=(),
                           options=TableOptions(max_versions=3))])
    down = make_plan(live, Catalog([events(secondary_indexes=(), search_indexes=(),
                                           options=TableOptions(max_versions=1))]))
    assert down.steps[0].risk == ops.DESTRUCTIVE
    up = make_plan(live, Catalog([events(secondary_indexes=(), search_indexes=(),
                                         options=TableOptions(max_versions=5))]))
    assert up.steps[0].risk == ops.SAFE
    assert "can make old versions readable again" in up.steps[0].reason


def test_changed_index_is_drop_then_create_said_plainly():
    live = Catalog([events()])
    target = Catalog([events(secondary_indexes=[SecondaryIndex("events_by_user", ["user", "score"])])])
    plan = make_plan(live, target)
    assert _kinds(plan) == ["drop_index", "create_index"]
    assert plan.steps[0].risk == ops.DESTRUCTIVE
    assert "cannot be altered" in plan.steps[0].reason


def test_index_dropped_before_its_column_and_created_after_new_column():
    live = Catalog([events()])
    target = Catalog([
        events(
            defined_columns=[DefinedColumn("user", "STRING"), DefinedColumn("team", "STRING")],
            secondary_indexes=[SecondaryIndex("events_by_team", ["team"])],
        )
    ])
    kinds = _kinds(make_plan(live, target))
    assert kinds.index("drop_index") < kinds.index("delete_defined_columns")
    assert kinds.index("add_defined_columns") < kinds.index("create_index")


def test_search_index_schema_change_is_a_reindex():
    live = Catalog([events()])
    target = Catalog([events(search_indexes=[
        SearchIndex("events_search", [SearchField("score", "LONG")], time_to_live=30 * DAY)
    ])])
    plan = make_plan(live, target)
    assert _kinds(plan) == ["reindex_search_index"]
    assert plan.steps[0].risk == ops.DATA_COPY
    assert plan.steps[0].changes == ["field score: sort_and_agg True -> False"]


def test_throughput_and_stream():
    live = Catalog([events()])
    target = Catalog([events(throughput=ReservedThroughput(10, 5),
                             stream=StreamSpec(enabled=True, expiration_hours=48))])
    plan = make_plan(live, target)
    assert _kinds(plan) == ["update_throughput", "update_stream"]
    off = make_plan(target, live)
    stream = next(s for s in off.steps if s.kind == "update_stream")
    assert stream.risk == ops.DESTRUCTIVE


def test_disabled_stream_expiration_is_not_a_change():
    live = Catalog([events(stream=StreamSpec(False, 24))])
    target = Catalog([events(stream=StreamSpec(False, 72))])
    assert not make_plan(live, target).has_changes


def test_key_change_under_same_name_is_a_clear_error():
    live = Catalog([events()])
    swapped = [PrimaryKeyColumn("ts", "INTEGER"), PrimaryKeyColumn("pk", "STRING")]
    target = Catalog([events(primary_key=swapped)])
    with pytest.raises(SchemaError) as info:
        make_plan(live, target)
    problem = info.value.problems[0]
    assert problem.rule == "plan.key-change-in-place"
    assert "replaces='events'" in problem.fix


def test_changed_derivation_is_a_key_change_when_live_knows_it():
    derived = [PrimaryKeyColumn("pk", "STRING", derivation=HashPrefix("user", 4)),
               PrimaryKeyColumn("ts", "INTEGER")]
    longer = [PrimaryKeyColumn("pk", "STRING", derivation=HashPrefix("user", 6)),
              PrimaryKeyColumn("ts", "INTEGER")]
    with pytest.raises(SchemaError):
        make_plan(Catalog([events(primary_key=derived)]), Catalog([events(primary_key=longer)]))
    # Unknown live derivation (a plain inspection): adopting the model changes nothing.
    assert not make_plan(Catalog([events()]), Catalog([events(primary_key=longer)])).has_changes


def test_replacing_table_rewrites_and_reports_old_one():
    old = events(name="events", search_indexes=())
    new = events(
        name="events_v2",
        primary_key=[PrimaryKeyColumn("ts", "INTEGER"), PrimaryKeyColumn("pk", "STRING")],
        secondary_indexes=[SecondaryIndex("events_v2_by_user", ["user"])],
        search_indexes=(),
        replaces="events",
    )
    plan = make_plan(Catalog([old]), Catalog([new]))
    assert _kinds(plan) == ["create_table", "rewrite_table"]
    rewrite = plan.steps[1]
    assert rewrite.risk == ops.DATA_COPY and rewrite.source == "events"
    assert "primary key (pk STRING, ts INTEGER) becomes (ts INTEGER, pk STRING)" in rewrite.reason
    assert [u.name for u in plan.undeclared] == ["events"]
    assert "replaced by events_v2" in plan.undeclared[0].note


def test_undeclared_tables_are_reported_never_dropped_unless_pruning():
    live = Catalog([events(), events(name="legacy", secondary_indexes=())])
    target = Catalog([events()])
    plan = make_plan(live, target)
    assert not plan.has_changes
    assert [u.name for u in plan.undeclared] == ["legacy"]
    pruned = make_plan(live, target, prune=True)
    assert _kinds(pruned) == ["drop_search_index", "drop_table"]
    assert pruned.steps[-1].risk == ops.DESTRUCTIVE


def test_renderers_agree_on_content():
    plan = make_plan(Catalog([events()]), Catalog([events(options=TableOptions(time_to_live=7 * DAY,
                                                                                allow_update=False),
                                                          search_indexes=())]))
    text = plan_text(plan, colour=False)
    markdown = plan_markdown(plan)
    data = json.loads(plan_json(plan))
    assert "drop search index events_search of events" in text
    assert "| 1 | `-` | drop search index events_search of events | **destructive** |" in markdown
    assert "--allow-destructive" in text and "--allow-destructive" in markdown
    assert data["summary"] == {"safe": 0, "data-copy": 0, "destructive": 2}
    assert data["source_fingerprint"] == Catalog([events()]).fingerprint()
    assert [s["kind"] for s in data["steps"]] == ["drop_search_index", "update_options"]


def test_no_changes_rendering():
    catalog = Catalog([events()])
    plan = make_plan(catalog, catalog)
    assert plan_text(plan, colour=False).startswith("No changes.")
    assert "**No changes.**" in plan_markdown(plan)
