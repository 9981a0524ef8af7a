"""Access-pattern lint, lint configuration and suppression, and lint in the CLI and plans."""

from __future__ import annotations

import json

import attrs
import pytest
from click.testing import CliRunner

from tsmigrate import AccessPattern as DeclaredPattern
from tsmigrate import Column, GlobalIndex, Model, PrimaryKey, SearchField, SearchIndex
from tsmigrate.cli import main
from tsmigrate.errors import ConfigError, SchemaError
from tsmigrate.keys import Concat, Descending, HashPrefix, TimeBucket
from tsmigrate.lint import LintConfig, run_lint
from tsmigrate.lint.access import key_serves, routes
from tsmigrate.planning.plan import make_plan
from tsmigrate.planning.planrender import plan_json, plan_markdown, plan_text
from tsmigrate.schema import (
    AccessPattern,
    AttributeColumn,
    Catalog,
    DefinedColumn,
    PrimaryKeyColumn,
    SecondaryIndex,
    Table,
)
from tsmigrate.schema import SearchField as Field
from tsmigrate.schema import (
    SearchIndex as SearchIndexIR,
)
from tsmigrate.schema.model import compile_models

PK = PrimaryKeyColumn


def _serves(key, **pattern) -> bool:
    return key_serves(key, AccessPattern("p", **pattern))


def test_key_order_serves_prefix_equality_then_range_or_order():
    key = [PK("user", "STRING"), PK("day", "STRING"), PK("id", "STRING")]
    assert _serves(key, eq=["user"])
    assert _serves(key, eq=["user"], range="day")
    assert _serves(key, eq=["user", "day"], order_by="-id")
    assert _serves(key, eq=["user"], range="day", order_by="day")
    assert not _serves(key, eq=["day"])  # not a prefix
    assert not _serves(key, eq=["user"], range="id")  # skips day
    assert not _serves(key, eq=["user", "id"])  # id is not next after user
    assert not _serves(key, eq=["user"], range="day", order_by="id")


def test_derived_keys():
    hashed = [PK("pk", "STRING", derivation=HashPrefix("device")), PK("ts", "INTEGER")]
    assert _serves(hashed, eq=["device"], order_by="-ts")
    assert not _serves(hashed, range="device")  # a hash prefix destroys order
    concat = [PK("k", "STRING", derivation=Concat(["a", "b", "c"], pad={"b": 4})), PK("n", "INTEGER")]
    assert _serves(concat, eq=["a", "b", "c"], range="n")
    assert _serves(concat, eq=["a", "b"], range="c")  # a range on the last field of the concatenation
    assert not _serves(concat, eq=["a"], range="c")
    descending = [PK("u", "STRING"), PK("rts", "INTEGER", derivation=Descending("ts"))]
    assert _serves(descending, eq=["u"], range="ts")
    bucketed = [PK("b", "INTEGER", derivation=TimeBucket("ts", 16)), PK("ts", "INTEGER")]
    assert _serves(bucketed, range="ts")  # fanned out over the buckets


def _orders(**changes) -> Table:
    base = Table(
        name="orders",
        primary_key=[PK("user", "STRING"), PK("id", "INTEGER")],
        defined_columns=[DefinedColumn("status", "STRING")],
        access_patterns=[AccessPattern("mine", eq=["user"])],
    )
    return attrs.evolve(base, **changes)


def test_unservable_pattern_proposes_the_cheapest_fix():
    by_status = AccessPattern("by_status", eq=["status"])
    findings = run_lint(Catalog([_orders(access_patterns=[by_status])]))
    [finding] = findings
    assert finding.code == "TS-AP501" and finding.severity == "error"
    assert finding.field == "access pattern by_status"
    assert "add GlobalIndex(keys=['status'])" in finding.fix
    served = _orders(access_patterns=[by_status],
                     secondary_indexes=[SecondaryIndex("orders_by_status", ["status"])])
    assert routes(served, by_status)[0].describe() == "global index orders_by_status"
    assert not run_lint(Catalog([served]))


def test_new_table_gets_a_key_reorder_proposal_live_one_an_index():
    by_id = AccessPattern("by_id", eq=["id"])
    table = _orders(access_patterns=[by_id])
    [unknown] = run_lint(Catalog([table]))  # tsmigrate lint: whether it exists is not known
    assert unknown.fix == ("if table orders is not created yet, declare its primary key in the "
                           "order (id, user), which serves every declared pattern; once it exists "
                           "its key cannot change, so add GlobalIndex(keys=['id'])")
    [new] = run_lint(Catalog([table]), live=Catalog())
    assert new.fix == ("table orders does not exist yet: declare its primary key in the order "
                       "(id, user), which serves every declared pattern")
    [live] = run_lint(Catalog([table]), live=Catalog([table]))
    assert live.fix == "add GlobalIndex(keys=['id'])"


def test_search_index_route_and_proposal():
    by_note = AccessPattern("by_note", eq=["note"], order_by="-score")
    table = _orders(access_patterns=[by_note],
                    attributes=[AttributeColumn("note", "STRING"), AttributeColumn("score", "DOUBLE")])
    [finding] = run_lint(Catalog([table]))
    assert finding.fix == "add a SearchIndex over ['note'] with 'score' sortable (sort=True)"
    search = SearchIndexIR("s", [Field("note", "KEYWORD"), Field("score", "DOUBLE", sort_and_agg=True)])
    served = attrs.evolve(table, search_indexes=[search])
    assert [r.describe() for r in routes(served, by_note)] == ["search index s"]
    unsorted = attrs.evolve(table, search_indexes=[attrs.evolve(search, fields=[Field("note", "KEYWORD")])])
    assert routes(unsorted, by_note) == []


def test_plan_dropping_the_serving_index_is_flagged_on_its_step():
    pattern = AccessPattern("by_status", eq=["status"])
    live = _orders(access_patterns=[pattern],
                   secondary_indexes=[SecondaryIndex("orders_by_status", ["status"])])
    target = attrs.evolve(live, secondary_indexes=())
    plan = make_plan(Catalog([live]), Catalog([target]))
    findings = run_lint(Catalog([target]), live=Catalog([live]), plan=plan)
    broke = [f for f in findings if f.code == "TS-AP504"]
    assert len(broke) == 1 and broke[0].step == 1
    assert "served today by global index orders_by_status" in broke[0].message
    assert any(f.code == "TS-AP501" for f in findings)
    assert "TS-AP504" in plan_text(plan, colour=False, findings=findings)
    assert "`TS-AP504`" in plan_markdown(plan, findings=findings)
    assert json.loads(plan_json(plan, findings))["lint"][0]["code"] in {"TS-AP501", "TS-AP504"}


def test_configuration_changes_severity_and_disables():
    bad = Catalog([_orders(access_patterns=[AccessPattern("x", eq=["status"])])])
    config = LintConfig.from_settings({"severity": {"TS-AP501": "warning"}})
    assert [f.severity for f in run_lint(bad, config=config)] == ["warning"]
    assert run_lint(bad, config=LintConfig.from_settings({"disable": ["TS-AP501"]})) == []
    with pytest.raises(ConfigError, match="unknown lint code 'TS-XX999'"):
        LintConfig.from_settings({"disable": ["TS-XX999"]})
    with pytest.raises(ConfigError, match="is not one of error, warning, info"):
        LintConfig.from_settings({"severity": {"TS-AP501": "fatal"}})


def _model(**options):
    class Ledger(Model, table="ledger", **options):
        account = PrimaryKey(str)
        seq = PrimaryKey(int)
        memo = Column(str, defined=True)
        by_memo = DeclaredPattern(eq=["memo"])

    return Ledger


def test_inline_suppression_needs_a_reason():
    flagged = compile_models([_model()])
    assert [f.code for f in run_lint(flagged)] == ["TS-AP501"]
    quiet = compile_models([_model(lint_ignore={"TS-AP501": "memo lookups are rare admin scans"})])
    assert run_lint(quiet) == []
    with pytest.raises(SchemaError) as info:
        compile_models([_model(lint_ignore={"TS-AP501": "  "})])
    assert info.value.problems[0].rule == "model.lint-ignore"
    assert "needs a reason" in info.value.problems[0].message


def test_example_patterns_are_all_served():
    class Feed(Model, table="feed"):
        user = PrimaryKey(str)
        ts = PrimaryKey(int)
        kind = Column(str, defined=True)
        body = Column(str)
        by_kind = GlobalIndex(keys=["kind"])
        search = SearchIndex(fields=[SearchField("body", "text"), SearchField("ts", "long", sort=True)])
        timeline = DeclaredPattern(eq=["user"], order_by="-ts")
        of_kind = DeclaredPattern(eq=["kind"])
        text = DeclaredPattern(eq=["body"], order_by="-ts")

    assert [f for f in run_lint(compile_models([Feed])) if f.code.startswith("TS-AP")] == []


def test_lint_command_exit_codes(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["lm"]\n')
    (tmp_path / "lm.py").write_text(
        "from tsmigrate import AccessPattern, Column, Model, PrimaryKey\n"
        "class L(Model, table='l'):\n"
        "    a = PrimaryKey(str)\n"
        "    b = Column(str, defined=True)\n"
        "    by_b = AccessPattern(eq=['b'])\n"
    )
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["lint"])
    assert result.exit_code == 1
    assert "TS-AP501" in result.output and "GlobalIndex(keys=['b'])" in result.output
    as_json = CliRunner().invoke(main, ["lint", "--format", "json"])
    assert json.loads(as_json.output)[0]["code"] == "TS-AP501"
    # Configured down to a warning (from its default, error): reported, and the exit code is 0.
    (tmp_path / "pyproject.toml").write_text(
        '[tool.tsmigrate]\nmodels = ["lm"]\n[tool.tsmigrate.lint]\nseverity = {"TS-AP501" = "warning"}\n'
    )
    warned = CliRunner().invoke(main, ["lint", "--format", "json"])
    assert warned.exit_code == 0
    assert [(f["code"], f["severity"]) for f in json.loads(warned.output)] == [("TS-AP501", "warning")]
    (tmp_path / "pyproject.toml").write_text(
        '[tool.tsmigrate]\nmodels = ["lm"]\n[tool.tsmigrate.lint]\ndisable = ["TS-AP501"]\n'
    )
    disabled = CliRunner().invoke(main, ["lint"])
    assert disabled.exit_code == 0 and "TS-AP501" not in disabled.output
