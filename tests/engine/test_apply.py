"""apply through the local server and the official SDK: plan, lock, history, resume."""

from __future__ import annotations

import threading
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, assume, given, settings
from samples import DAY, events
from strategies import catalog_changes
from tablestore import Row

from tsmigrate.instance import adapter
from tsmigrate.instance.apply import ApplyHooks, ApplyOptions, ApplyRefused, apply, live_catalog
from tsmigrate.instance.state import STATE_TABLE, LockHeld, State
from tsmigrate.planning import ops
from tsmigrate.planning.plan import make_plan
from tsmigrate.planning.planfile import plan_document
from tsmigrate.schema import (
    Catalog,
    PrimaryKeyColumn,
    SecondaryIndex,
    TableOptions,
)
from tsmigrate.schema.validate import validate_catalog

IDENTITY = "local:test"


def _live(client) -> Catalog:
    return adapter.inspect(client, exclude=(STATE_TABLE,))


def _replan(client, models: Catalog):
    return make_plan(live_catalog(client), models, prune=True)


def test_apply_then_plan_has_no_changes(ots_client):
    models = Catalog([events(), events(name="audit", secondary_indexes=(), search_indexes=())])
    outcome = apply(ots_client, models, target_identity=IDENTITY)
    assert outcome.executed == 3  # two tables (the index is created with its table), one search index
    assert live_catalog(ots_client).fingerprint() == outcome.plan.target_fingerprint
    assert not _replan(ots_client, models).has_changes
    history = State(ots_client).history()
    assert [h["status"] for h in history].count("done") == outcome.executed
    assert {h["step"] for h in history} >= {"create_table", "create_search_index"}
    # The lock is released: a second apply takes it at once.
    assert apply(ots_client, models, target_identity=IDENTITY).executed == 0


def test_destructive_steps_need_the_flag(ots_client):
    apply(ots_client, Catalog([events()]), target_identity=IDENTITY)
    lower = Catalog([events(options=TableOptions(time_to_live=7 * DAY, allow_update=False),
                             search_indexes=())])
    with pytest.raises(ApplyRefused, match="--allow-destructive"):
        apply(ots_client, lower, target_identity=IDENTITY)
    assert _live(ots_client).table("events").options.time_to_live == 30 * DAY
    outcome = apply(ots_client, lower, ApplyOptions(allow_destructive=True), target_identity=IDENTITY)
    assert [s.kind for s in outcome.plan.steps] == ["drop_search_index", "update_options"]
    assert _live(ots_client).table("events").options.time_to_live == 7 * DAY


def test_undeclared_tables_survive_unless_pruned(ots_client):
    apply(ots_client, Catalog([events(), events(name="legacy", secondary_indexes=(),
                                                  search_indexes=())]), target_identity=IDENTITY)
    only_events = Catalog([events()])
    assert apply(ots_client, only_events, target_identity=IDENTITY).executed == 0
    assert _live(ots_client).table("legacy") is not None
    apply(ots_client, only_events, ApplyOptions(prune=True, allow_destructive=True), target_identity=IDENTITY)
    assert _live(ots_client).table("legacy") is None


def test_plan_file_is_pinned(ots_client):
    models = Catalog([events()])
    document = plan_document(make_plan(_live(ots_client), models), IDENTITY)
    edited = {**document, "steps": document["steps"][:1]}
    with pytest.raises(ApplyRefused, match="edited"):
        apply(ots_client, models, target_identity=IDENTITY, document=edited)
    with pytest.raises(ApplyRefused, match="made for local:test"):
        apply(ots_client, models, target_identity="local:other", document=document)
    with pytest.raises(ApplyRefused, match="other models"):
        apply(ots_client, Catalog([events(name="other")]), target_identity=IDENTITY,
              document=document)
    assert _live(ots_client).tables == ()
    assert apply(ots_client, models, target_identity=IDENTITY, document=document).executed == 2


def test_plan_file_refused_when_live_state_moved_and_resumed_midway(ots_client):
    models = Catalog([events(), events(name="audit", search_indexes=(),
                                         secondary_indexes=[SecondaryIndex("audit_by_user", ["user"])])])
    document = plan_document(make_plan(_live(ots_client), models), IDENTITY)
    plan = make_plan(_live(ots_client), models)
    # An earlier apply died after its first step: the file's plan resumes from there.
    adapter.execute(ots_client, plan.steps[0])
    outcome = apply(ots_client, models, target_identity=IDENTITY, document=document)
    assert "resuming after step 1" in outcome.note
    assert outcome.executed == len(plan.steps) - 1
    # Someone changes the instance by hand: the same file no longer applies.
    ots_client.delete_table("audit")
    with pytest.raises(ApplyRefused, match="changed since the plan was made"):
        apply(ots_client, models, target_identity=IDENTITY, document=document)


def test_two_concurrent_applies_exactly_one_proceeds(ots_instance):
    models = Catalog([events()])
    inside, release = threading.Event(), threading.Event()
    results: dict[str, object] = {}

    def slow_confirm(plan) -> bool:
        inside.set()
        release.wait(30)
        return True

    def first() -> None:
        results["first"] = apply(ots_instance.client(), models, hooks=ApplyHooks(confirm=slow_confirm),
                                 target_identity=IDENTITY)

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(30)
    with pytest.raises(LockHeld, match="another apply holds the lock"):
        apply(ots_instance.client(), models, target_identity=IDENTITY)
    release.set()
    thread.join(60)
    assert results["first"].executed == 2


def test_stale_lock_of_a_dead_process_is_taken_over(ots_client):
    state = State(ots_client)
    state.ensure_table()
    state.acquire()
    # Pretend the holder was a process on this host that has died.
    adapter.put_row(ots_client, STATE_TABLE, [("kind", "lock"), ("id", "apply")],
                    {**state._lock_columns(), "pid": 2**22 + 12345})
    outcome = apply(ots_client, Catalog([events()]), target_identity=IDENTITY)
    assert "took over a stale lock" in outcome.note


def test_a_rewrite_step_runs_the_rewrite_engine_to_ready(ots_client):
    apply(ots_client, Catalog([events(search_indexes=())]), target_identity=IDENTITY)
    ots_client.put_row("events", Row([("pk", "a"), ("ts", 1)], [("user", "u1"), ("score", 3)]))
    swapped = [PrimaryKeyColumn("ts", "INTEGER"), PrimaryKeyColumn("pk", "STRING")]
    v2 = events(name="events_v2", primary_key=swapped, replaces="events", search_indexes=(),
                 secondary_indexes=[SecondaryIndex("events_v2_by_user", ["user"])])
    outcome = apply(ots_client, Catalog([v2]), target_identity=IDENTITY)
    assert [(r.target, r.phase) for r in outcome.rewrites] == [("events_v2", "ready")]
    _consumed, row, _token = ots_client.get_row("events_v2", [("ts", 1), ("pk", "a")])
    assert row is not None and ("user", "u1") in [(c[0], c[1]) for c in row.attribute_columns]
    # Planning again sees no change: prepare's widened deviation is the rewrite's business.
    assert not make_plan(live_catalog(ots_client), Catalog([v2])).has_changes


def _apply_checking_every_step(client, models: Catalog):
    """apply, asserting after every step that the whole live schema, as inspection shows it (key
    derivations included), has the fingerprint the plan predicted for it. A step whose table
    does not reach the predicted state fails within seconds with both states (apply itself
    would wait 300 s)."""
    plans: list = []
    real_settle = adapter.settle

    def settle_or_show(client, name, expected, timeout_s=300.0, on_wait=None):
        if real_settle(client, name, expected, timeout_s=10.0, on_wait=on_wait):
            return True
        live = _live(client)
        current = next((t for t in live.tables if t.name == name), None)
        raise AssertionError(f"{name} did not become the plan's prediction:\n"
                             f"live      {current}\npredicted {expected}")

    def check(number: int, total: int, step) -> None:
        # Steps 1 .. number-1 have run: the live schema is the prediction after step number-1.
        plan = plans[0]
        expected = plan.step_fingerprints[number - 2] if number > 1 else plan.source_fingerprint
        assert live_catalog(client).fingerprint() == expected, (
            f"after step {number - 1} of {total} "
            f"({plan.steps[number - 2].summary() if number > 1 else 'none'})"
        )

    with patch.object(adapter, "settle", settle_or_show):
        outcome = apply(client, models, ApplyOptions(allow_destructive=True, prune=True),
                        ApplyHooks(confirm=lambda plan: plans.append(plan) or True, progress=check),
                        target_identity=IDENTITY)
    # ... and after the last step: what inspection shows, recorded key derivations included.
    assert live_catalog(client).fingerprint() == outcome.plan.target_fingerprint
    if outcome.plan.steps:
        assert outcome.plan.step_fingerprints[-1] == outcome.plan.target_fingerprint
    return outcome


# Each example applies two catalogs of up to 3 tables through the server (about 0.3 s each);
# 25 examples keep the whole suite within CI's minutes while the widened strategy (search
# indexes created, replaced and added on existing tables, key derivations on) gets exercised.
@pytest.mark.slow  # 25 examples of two applies each: thousands of requests
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much,
                                 HealthCheck.too_slow])
@given(pair=catalog_changes(max_tables=3))
def test_applying_any_change_then_planning_again_yields_no_changes(local_ots, pair):
    before, after = pair
    assume(not validate_catalog(after))
    client = local_ots.fresh_instance("prop").client()
    _apply_checking_every_step(client, before)
    second = _apply_checking_every_step(client, after)
    assert not _replan(client, after).has_changes
    assert all(s.kind != ops.RewriteTable.kind for s in second.plan.steps)
