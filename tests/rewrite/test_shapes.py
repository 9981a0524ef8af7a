"""What a rewrite needs of its two tables, from their declarations (``tsmigrate.contract.shapes``):
whether rows the new model writes can be carried back to the old key, and the options the copy,
verification and cut-over cannot work with. Pure: plain IR values, no server."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import valid_tables

from tsmigrate.contract import shapes
from tsmigrate.contract.transform import RowTransform, TransformError
from tsmigrate.errors import SchemaError
from tsmigrate.keys import Concat, Descending, HashPrefix, TimeBucket
from tsmigrate.planning import ops
from tsmigrate.planning.plan import make_plan
from tsmigrate.planning.planrender import plan_json, plan_markdown, plan_text
from tsmigrate.schema import (
    INTEGER,
    NO_TTL,
    PRIMARY_KEY_TYPES,
    STRING,
    AttributeColumn,
    Catalog,
    DefinedColumn,
    PrimaryKeyColumn,
    Table,
    TableOptions,
    physical_table,
)

DAY = 86400

# The README's shape: readings keyed (device, ts), rewritten to (device, seq) with region.
READINGS = Table("readings", [PrimaryKeyColumn("device", STRING), PrimaryKeyColumn("ts", INTEGER)])


def _v2(*declared: AttributeColumn, **changes: Any) -> Table:
    return Table("readings_by_seq", [PrimaryKeyColumn("device", STRING), PrimaryKeyColumn("seq", INTEGER)],
                 attributes=declared, replaces="readings", source="models.readings.ReadingV2", **changes)


# --- revert_problem: examples ------------------------------------------------------------------


def test_a_new_key_without_a_field_of_the_old_key_names_it_and_what_to_declare():
    reason = shapes.revert_problem(READINGS, _v2())
    assert reason == (
        "the new model's rows have no 'ts', a field of the old key (the key of readings is built "
        "from device, ts): declare ts = Column(int) on ReadingV2 to keep revert possible")


def test_declaring_the_missing_field_keeps_revert_possible_as_an_attribute_or_a_defined_column():
    assert shapes.revert_problem(READINGS, _v2(AttributeColumn("ts", INTEGER))) is None
    assert shapes.revert_problem(READINGS, _v2(defined_columns=[DefinedColumn("ts", INTEGER)])) is None


def test_every_missing_field_is_named_and_a_table_without_a_model_is_named_by_its_table():
    old = Table("events", [PrimaryKeyColumn("user", STRING), PrimaryKeyColumn("day", STRING),
                           PrimaryKeyColumn("n", INTEGER)])
    new = Table("events_v2", [PrimaryKeyColumn("user", STRING)], replaces="events")
    reason = shapes.revert_problem(old, new)
    assert reason is not None
    assert "no 'day' or 'n', fields of the old key" in reason
    assert "declare day = Column(str) and n = Column(int) on the model of events_v2" in reason


def test_a_time_bucket_is_recomputed_so_it_needs_its_source_field():
    # Old key (bucket of ts, device): the bucket is ts mod 16, and gives no ts back.
    old = Table("readings", [PrimaryKeyColumn("bucket", INTEGER, derivation=TimeBucket("ts", 16)),
                             PrimaryKeyColumn("device", STRING)])
    bucketed_new = Table("readings_v2", [PrimaryKeyColumn("b", INTEGER, derivation=TimeBucket("ts", 8)),
                                         PrimaryKeyColumn("device", STRING)])
    assert "'ts'" in (shapes.revert_problem(old, bucketed_new) or "")
    # Declared, or an invertible derivation of it in the new key: possible.
    declared = attrs.evolve(bucketed_new, attributes=[AttributeColumn("ts", INTEGER)])
    assert shapes.revert_problem(old, declared) is None
    descending = Table("readings_v2", [PrimaryKeyColumn("device", STRING),
                                       PrimaryKeyColumn("ts_desc", INTEGER, derivation=Descending("ts"))])
    assert shapes.revert_problem(old, descending) is None


def test_fields_inside_an_invertible_derivation_of_the_new_key_give_the_old_key_back():
    concat = _v2()
    concat = attrs.evolve(concat, primary_key=[
        PrimaryKeyColumn("key", STRING, derivation=Concat(["device", "ts"], pad={"ts": 13})),
        PrimaryKeyColumn("region", STRING)])
    assert shapes.revert_problem(READINGS, concat) is None
    hashed_old = Table("r", [PrimaryKeyColumn("pk", STRING, derivation=HashPrefix("device")),
                             PrimaryKeyColumn("seq", INTEGER)])
    assert shapes.revert_problem(hashed_old, attrs.evolve(concat, primary_key=[
        PrimaryKeyColumn("seq", INTEGER), PrimaryKeyColumn("device", STRING)])) is None


def test_an_old_key_whose_derivation_is_unknown_needs_the_key_column_itself():
    # Inspection of a table tsmigrate did not create cannot tell how its key was derived: the
    # column is a value of its own, which the new model would have to hold.
    hashed_old = Table("r", [PrimaryKeyColumn("pk", STRING, derivation=HashPrefix("device")),
                             PrimaryKeyColumn("seq", INTEGER)])
    new = Table("r2", [PrimaryKeyColumn("seq", INTEGER), PrimaryKeyColumn("device", STRING)])
    assert "'pk'" in (shapes.revert_problem(physical_table(hashed_old), new) or "")


def test_a_custom_key_transform_has_no_inverse():
    reason = shapes.revert_problem(READINGS, _v2(AttributeColumn("ts", INTEGER)), "app.keys:by_region")
    assert reason is not None and "custom transform (app.keys:by_region) with no inverse" in reason


# --- revert_problem: properties ----------------------------------------------------------------


@st.composite
def _keeping_every_old_field(draw: Any) -> tuple[Table, Table]:
    """A valid old table, and a new one whose key holds some fields of the old key as plain
    columns (shuffled) and whose model declares the others."""
    old = draw(valid_tables())
    fields = list(dict.fromkeys(f for c in old.primary_key
                                for f in (c.derivation.sources if c.derivation else (c.name,))))
    keyable = [f for f in fields if old.column_type(f) in PRIMARY_KEY_TYPES]
    keyed = draw(st.lists(st.sampled_from(keyable), min_size=1, max_size=4, unique=True))
    declared = [f for f in fields if f not in keyed]
    as_defined = draw(st.sets(st.sampled_from(declared))) if declared else set()
    kind = {f: old.column_type(f) or STRING for f in fields}
    new = Table(
        "new_" + old.name[:200],
        [PrimaryKeyColumn(f, kind[f]) for f in keyed],
        defined_columns=[DefinedColumn(f, kind[f]) for f in declared if f in as_defined],
        attributes=[AttributeColumn(f, kind[f]) for f in declared if f not in as_defined],
    )
    return old, new


@given(_keeping_every_old_field())
def test_a_new_table_that_keeps_every_old_key_field_as_key_or_declared_column_is_revertible(pair):
    old, new = pair
    assert shapes.revert_problem(old, new) is None


@given(_keeping_every_old_field(), st.data())
def test_leaving_out_a_declared_field_of_the_old_key_makes_revert_impossible_and_names_it(pair, data):
    old, new = pair
    declared = [c.name for c in (*new.defined_columns, *new.attributes)]
    if not declared:
        return
    gone = data.draw(st.sampled_from(declared))
    without = attrs.evolve(new, defined_columns=[c for c in new.defined_columns if c.name != gone],
                           attributes=[c for c in new.attributes if c.name != gone])
    reason = shapes.revert_problem(old, without)
    assert reason is not None and repr(gone) in reason


# A pool of fields for both keys, with values a new-model row holds: strings a Concat keeps in
# order, integers every derivation here takes.
FIELDS = {"a": STRING, "b": INTEGER, "c": STRING, "d": INTEGER}
VALUES = {STRING: st.text("abcxyz", min_size=1, max_size=4), INTEGER: st.integers(0, 9999)}


@st.composite
def _key(draw: Any, prefix: str, pool: list[str]) -> list[PrimaryKeyColumn]:
    """1-3 key columns over ``pool``: plain fields, or derived from them."""
    columns: list[PrimaryKeyColumn] = []
    free = list(pool)
    for i in range(draw(st.integers(1, 3))):
        if not free:
            break
        kind = draw(st.sampled_from(["plain", "plain", "concat", "hash", "descending", "bucket"]))
        ints = [f for f in free if FIELDS[f] == INTEGER]
        strs = [f for f in free if FIELDS[f] == STRING]
        name = f"{prefix}{i}"
        if kind == "concat" and len(free) >= 2:
            parts = draw(st.lists(st.sampled_from(free), min_size=2, max_size=3, unique=True))
            pad = {f: 4 for f in parts if FIELDS[f] == INTEGER}
            columns.append(PrimaryKeyColumn(name, STRING, derivation=Concat(parts, pad=pad)))
        elif kind == "hash" and strs:
            parts = [draw(st.sampled_from(strs))]
            columns.append(PrimaryKeyColumn(name, STRING, derivation=HashPrefix(parts[0])))
        elif kind in ("descending", "bucket") and ints:
            parts = [draw(st.sampled_from(ints))]
            derivation = Descending(parts[0], 10**6) if kind == "descending" else TimeBucket(parts[0], 7)
            columns.append(PrimaryKeyColumn(name, INTEGER, derivation=derivation))
        else:
            parts = [draw(st.sampled_from(free))]
            columns.append(PrimaryKeyColumn(parts[0], FIELDS[parts[0]]))
        free = [f for f in free if f not in parts]
    return columns


@given(st.data())
def test_revert_is_possible_exactly_when_the_reverse_transform_rebuilds_the_old_key_of_a_new_row(data):
    """The reverse capture's transform, given a row as the new model writes it (its key and
    declared fields, nothing the copy added), gives back the old key when revert_problem says
    revert is possible, and fails when it says not."""
    pool = data.draw(st.lists(st.sampled_from(sorted(FIELDS)), min_size=1, max_size=4, unique=True))
    old = Table("old", data.draw(_key("s", pool)),
                attributes=[AttributeColumn(f, FIELDS[f]) for f in pool])
    new_key = data.draw(_key("t", pool))
    keyed = {c.name for c in new_key if c.derivation is None}
    declared = data.draw(st.lists(st.sampled_from(pool), unique=True))
    new = Table("new", new_key, attributes=[AttributeColumn(f, FIELDS[f]) for f in declared
                                            if f not in keyed])
    values = {f: data.draw(VALUES[FIELDS[f]]) for f in pool}
    old_key = [(c.name, c.derivation.derive(values) if c.derivation else values[c.name])
               for c in old.primary_key]
    new_key_values = [(c.name, c.derivation.derive(values) if c.derivation else values[c.name])
                      for c in new.primary_key]
    row = [(c.name, values[c.name], 1) for c in new.attributes]
    backward = RowTransform.build(new, old)
    if shapes.revert_problem(old, new) is None:
        assert backward.apply(new_key_values, row).primary_key == old_key
    else:
        with pytest.raises(TransformError):
            backward.apply(new_key_values, row)


# --- problems ------------------------------------------------------------------------------------


def _rules(old: Table, new: Table) -> list[str]:
    return [p.rule for p in shapes.problems(old, new)]


def _ttl(table: Table, seconds: int, **options: Any) -> Table:
    return attrs.evolve(table, options=TableOptions(time_to_live=seconds, **options))


def test_a_shorter_ttl_on_the_new_table_is_refused_with_the_old_ttl_to_declare():
    [problem] = shapes.problems(_ttl(READINGS, 30 * DAY), _ttl(_v2(), DAY))
    assert problem.rule == "rewrite.ttl-shorter"
    assert problem.table == "readings_by_seq" and problem.model == "models.readings.ReadingV2"
    assert "readings_by_seq keeps cells 1d but readings, which it replaces, keeps them 30d" in problem.message
    assert "Invalid timestamp" in problem.message
    assert problem.fix.startswith('declare ttl="30d" on ReadingV2 for the rewrite; lower it after '
                                  "`tsmigrate rewrite finish readings_by_seq`")
    # An old table that keeps cells for ever: a TTL on the new one is shorter.
    [problem] = shapes.problems(READINGS, _ttl(_v2(), DAY))
    assert problem.rule == "rewrite.ttl-shorter" and "declare ttl=None on ReadingV2" in problem.fix


def test_a_longer_ttl_or_none_on_the_new_table_is_refused_since_verification_never_settles():
    for longer in (NO_TTL, 60 * DAY):
        [problem] = shapes.problems(_ttl(READINGS, 30 * DAY), _ttl(_v2(), longer))
        assert problem.rule == "rewrite.ttl-longer"
        assert "verification finds them for ever" in problem.message
        assert 'declare ttl="30d" on ReadingV2 for the rewrite; raise it after' in problem.fix


def test_the_same_ttl_and_other_option_changes_are_not_problems():
    old = _ttl(READINGS, 30 * DAY, allow_update=False, max_versions=1, max_time_deviation=60)
    for new in (_ttl(_v2(), 30 * DAY, max_versions=3), _ttl(_v2(), 30 * DAY, allow_update=False),
                _ttl(_v2(), 30 * DAY, max_time_deviation=7 * DAY)):
        assert _rules(old, new) == []
    assert _rules(READINGS, _v2()) == []
    # Fewer versions on the new table: the copy reads as many as it keeps.
    assert _rules(attrs.evolve(READINGS, options=TableOptions(max_versions=5)), _v2()) == []


def test_a_new_model_writing_updates_while_the_old_table_takes_none_is_refused():
    no_updates = _ttl(READINGS, 30 * DAY, allow_update=False)
    [problem] = shapes.problems(no_updates, _ttl(_v2(writes="update"), 30 * DAY))
    assert problem.rule == "rewrite.updates-routed-to-source" and problem.field == "writes"
    assert "until the switch (and after a revert) its writes go to readings" in problem.message
    assert "declare writes='put' on it" in problem.fix
    assert _rules(no_updates, _ttl(_v2(), 30 * DAY)) == []  # writes="put": whole rows
    assert _rules(READINGS, _v2(writes="update")) == []  # the old table takes updates


def test_check_raises_every_problem_as_a_schema_error():
    with pytest.raises(shapes.RewriteShapeError) as refused:
        shapes.check(_ttl(READINGS, 30 * DAY, allow_update=False), _v2(writes="update"))
    assert isinstance(refused.value, SchemaError)
    assert [p.rule for p in refused.value.problems] == ["rewrite.ttl-longer",
                                                        "rewrite.updates-routed-to-source"]
    shapes.check(READINGS, _v2())  # nothing to refuse


# --- the plan --------------------------------------------------------------------------------------


def test_plan_refuses_a_rewrite_whose_tables_do_not_fit_before_any_step():
    with pytest.raises(shapes.RewriteShapeError) as refused:
        make_plan(Catalog([_ttl(READINGS, 30 * DAY)]), Catalog([_v2(AttributeColumn("ts", INTEGER))]))
    [problem] = refused.value.problems
    assert problem.rule == "rewrite.ttl-longer" and "readings_by_seq" in str(refused.value)


def test_the_plan_step_says_when_revert_is_not_possible_in_every_format():
    plan = make_plan(Catalog([READINGS]), Catalog([_v2()]))
    [step] = [s for s in plan.steps if isinstance(s, ops.RewriteTable)]
    note = f"revert after switch is not possible: {shapes.revert_problem(READINGS, _v2())}"
    assert step.revert_note == note
    assert note in plan_text(plan, colour=False)
    assert note in plan_markdown(plan)
    import json

    [as_json] = [s for s in json.loads(plan_json(plan))["steps"] if s["kind"] == "rewrite_table"]
    assert as_json["args"]["revert"] == {"possible": False, "reason": step.revert}

    fine = make_plan(Catalog([READINGS]), Catalog([_v2(AttributeColumn("ts", INTEGER))]))
    [step] = [s for s in fine.steps if isinstance(s, ops.RewriteTable)]
    assert step.revert == "" and "revert after switch" not in plan_text(fine, colour=False)
    [as_json] = [s for s in json.loads(plan_json(fine))["steps"] if s["kind"] == "rewrite_table"]
    assert as_json["args"]["revert"] == {"possible": True, "reason": None}
