"""The diff of a changed search index: reindexed (data-copy) rather than dropped and created,
TTL-only changes in place, and drop + create (destructive, with the reason) only where the
service cannot reindex. Pure: plain IR values and hypothesis."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from samples import DAY, events

from tsmigrate.planning import ops
from tsmigrate.planning.plan import make_plan
from tsmigrate.planning.planrender import plan_json, plan_markdown, plan_text
from tsmigrate.schema import (
    ASC,
    DESC,
    Catalog,
    DefinedColumn,
    IndexSorter,
    PrimaryKeyColumn,
    SearchField,
    SearchIndex,
    Table,
    TableOptions,
    physical,
)


def _kinds(plan) -> list[str]:
    return [s.kind for s in plan.steps]


def _search(*fields: SearchField, **changes) -> SearchIndex:
    return SearchIndex("events_search", fields, **{"time_to_live": 30 * DAY, **changes})


SCORE = SearchField("score", "LONG", sort_and_agg=True)


def test_a_field_added_and_a_type_changed_is_one_reindex_step():
    live = Catalog([events()])
    new = _search(SearchField("score", "DOUBLE", sort_and_agg=True), SearchField("user", "KEYWORD"))
    plan = make_plan(live, Catalog([events(search_indexes=[new])]))
    [step] = plan.steps
    assert step.kind == "reindex_search_index" and step.risk == ops.DATA_COPY
    assert step.changes == ["field user added (keyword)", "field score: LONG -> DOUBLE"]
    assert step.summary() == "reindex search index events_search of events"
    assert "events_search_reindex" in step.reason and "keeps serving" in step.reason
    assert "Searches never lose the index" in step.reason
    # The plan predicts the new schema under the old name, and nothing else.
    assert plan.target_fingerprint == physical(Catalog([events(search_indexes=[new])])).fingerprint()


def test_routing_presort_and_removed_fields_are_named():
    live = Catalog([events(search_indexes=[_search(SCORE, SearchField("user", "KEYWORD"))])])
    new = _search(SCORE, routing_fields=["pk"], index_sort=[IndexSorter("score", DESC)])
    [step] = make_plan(live, Catalog([events(search_indexes=[new])])).steps
    assert step.changes == ["field user removed", "routing () -> (pk)",
                            "presort the primary key (the default) -> -score"]


def test_ttl_only_stays_in_place():
    live = Catalog([events(options=TableOptions(time_to_live=60 * DAY, allow_update=False))])
    target = Catalog([events(options=TableOptions(time_to_live=60 * DAY, allow_update=False),
                             search_indexes=[_search(SCORE, time_to_live=60 * DAY)])])
    assert _kinds(make_plan(live, target)) == ["update_search_index_ttl"]


def test_ttl_and_schema_change_updates_ttl_in_place_then_reindexes():
    live = Catalog([events()])
    target = Catalog([events(options=TableOptions(time_to_live=7 * DAY, allow_update=False),
                             search_indexes=[_search(SCORE, SearchField("user", "KEYWORD"),
                                                     time_to_live=7 * DAY)])])
    plan = make_plan(live, target)
    assert _kinds(plan) == ["update_search_index_ttl", "update_options", "reindex_search_index"]
    reindex = plan.steps[2]
    assert reindex.before.time_to_live == reindex.index.time_to_live == 7 * DAY


def test_a_taken_reindex_name_falls_back_to_drop_and_create_with_the_reason():
    other = SearchIndex("events_search_reindex", [SCORE], time_to_live=30 * DAY)
    live = Catalog([events(search_indexes=[_search(SCORE), other])])
    target = Catalog([events(search_indexes=[_search(SCORE, SearchField("user", "KEYWORD")), other])])
    plan = make_plan(live, target)
    assert _kinds(plan) == ["drop_search_index", "create_search_index"]
    drop = plan.steps[0]
    assert drop.risk == ops.DESTRUCTIVE
    assert "cannot be reindexed because the table has or declares another search index named " \
           "events_search_reindex" in drop.reason


def test_a_name_too_long_for_its_reindex_falls_back():
    name = "s" * 250
    live = Catalog([events(search_indexes=[SearchIndex(name, [SCORE], time_to_live=30 * DAY)])])
    target = Catalog([events(search_indexes=[
        SearchIndex(name, [SCORE, SearchField("user", "KEYWORD")], time_to_live=30 * DAY)])])
    drop = make_plan(live, target).steps[0]
    assert drop.kind == "drop_search_index" and "255 characters" in drop.reason


def test_no_sort_and_the_default_sort_are_one_schema():
    """Item 5: the service reports an index created without a sort as sorted by the primary key
    ascending; that must not look like a change, either way round."""
    default = _search(SCORE, index_sort=[IndexSorter(None, ASC)])
    assert default == _search(SCORE) and default.index_sort == ()
    assert not make_plan(Catalog([events(search_indexes=[default])]), Catalog([events()])).has_changes
    assert not make_plan(Catalog([events()]), Catalog([events(search_indexes=[default])])).has_changes
    descending = _search(SCORE, index_sort=[IndexSorter(None, DESC)])
    assert _kinds(make_plan(Catalog([events()]), Catalog([events(search_indexes=[descending])]))) \
        == ["reindex_search_index"]


def test_every_output_format_says_what_changes_and_why_it_stays_available():
    live = Catalog([events()])
    plan = make_plan(live, Catalog([events(search_indexes=[
        _search(SCORE, SearchField("user", "KEYWORD"))])]))
    text = plan_text(plan, colour=False)
    assert "~  1. reindex search index events_search of events  [data-copy]" in text
    assert "field user added (keyword)" in text and "keeps serving searches" in text
    markdown = plan_markdown(plan)
    assert "| 1 | `~` | reindex search index events_search of events | **data-copy** | " \
           "field user added (keyword). The table's rows are indexed again" in markdown
    data = json.loads(plan_json(plan))
    [step] = data["steps"]
    assert step["kind"] == "reindex_search_index" and step["risk"] == "data-copy"
    assert data["summary"] == {"safe": 0, "data-copy": 1, "destructive": 0}
    assert [f["name"] for f in step["args"]["index"]["fields"]] == ["score", "user"]
    assert [f["name"] for f in step["args"]["before"]["fields"]] == ["score"]
    assert "field user added (keyword)" in step["reason"]


# --- properties -----------------------------------------------------------------------------------

COLUMNS = {"a": "STRING", "b": "INTEGER", "c": "DOUBLE", "d": "STRING"}
TYPES_FOR = {"STRING": ["KEYWORD", "TEXT"], "INTEGER": ["LONG", "KEYWORD"],
             "DOUBLE": ["DOUBLE", "KEYWORD"]}


@st.composite
def search_indexes(draw, ttl=None):
    names = draw(st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1, max_size=4, unique=True))
    fields = []
    for name in names:
        kind = draw(st.sampled_from(TYPES_FOR[COLUMNS[name]]))
        sortable = kind != "TEXT" and draw(st.booleans())
        fields.append(SearchField(name, kind, sort_and_agg=sortable,
                                  store=draw(st.booleans())))
    routing = draw(st.sampled_from([(), ("pk",)]))
    sortable = [f.name for f in fields if f.sort_and_agg]
    sort = []
    if sortable and draw(st.booleans()):
        sort.append(IndexSorter(draw(st.sampled_from(sortable)), draw(st.sampled_from([ASC, DESC]))))
    if draw(st.booleans()):
        sort.append(IndexSorter(None, draw(st.sampled_from([ASC, DESC]))))
    time_to_live = ttl if ttl is not None else draw(st.sampled_from([-1, DAY, 30 * DAY]))
    return SearchIndex("finder", fields, routing, sort, time_to_live)


def _table(index: SearchIndex) -> Table:
    return Table("t", [PrimaryKeyColumn("pk", "STRING")],
                 [DefinedColumn(n, t) for n, t in COLUMNS.items()],
                 TableOptions(allow_update=False), search_indexes=[index])


@settings(max_examples=150, deadline=None)
@given(search_indexes(), search_indexes())
@pytest.mark.slow
def test_property_a_changed_index_is_reindexed_never_dropped(old, new):
    plan = make_plan(Catalog([_table(old)]), Catalog([_table(new)]))
    kinds = _kinds(plan)
    assert "drop_search_index" not in kinds and "create_search_index" not in kinds
    same_schema = attrs.evolve(old, time_to_live=-1) == attrs.evolve(new, time_to_live=-1)
    assert kinds.count("reindex_search_index") == (0 if same_schema else 1)
    assert kinds.count("update_search_index_ttl") == (old.time_to_live != new.time_to_live)
    assert all(s.risk != ops.DESTRUCTIVE for s in plan.steps if s.kind == "reindex_search_index")
    # The steps take the live schema to the declared one, and planning again finds nothing.
    assert plan.target_fingerprint == physical(Catalog([_table(new)])).fingerprint()
    assert not make_plan(Catalog([_table(new)]), Catalog([_table(new)])).has_changes
    for step in plan.steps:
        if step.kind == "reindex_search_index":
            assert step.changes, "a reindex says what changes"
            added = {f.name for f in new.fields} - {f.name for f in old.fields}
            assert all(any(f"field {n} added" in c for c in step.changes) for n in added)


@settings(max_examples=60, deadline=None)
@given(search_indexes(ttl=-1), search_indexes(ttl=-1))
def test_property_with_the_reindex_name_taken_it_falls_back_destructively(old, new):
    blocker = SearchIndex("finder_reindex", [SearchField("a", "KEYWORD")])
    live = Catalog([attrs.evolve(_table(old), search_indexes=[old, blocker])])
    target = Catalog([attrs.evolve(_table(new), search_indexes=[new, blocker])])
    plan = make_plan(live, target)
    assert "reindex_search_index" not in _kinds(plan)
    if old != new:
        drop = plan.steps[0]
        assert drop.kind == "drop_search_index" and drop.risk == ops.DESTRUCTIVE
        assert "finder_reindex" in drop.reason
    assert plan.target_fingerprint == physical(target).fingerprint()
