"""The lint rule families (keys, columns, indexes, changes, tables): for each code a table or
plan that triggers it and a clean counterpart; the docs page; the example models."""

from __future__ import annotations

import json
import re
from pathlib import Path

import attrs
import pytest
from samples import DAY, events

from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.keys import Concat, Descending, HashPrefix, TimeBucket
from tsmigrate.lint import RULES, Finding, run_lint
from tsmigrate.lint.indexes import LIMITS, PREREQUISITES
from tsmigrate.lint.names import has_few_values, is_money, is_payload, is_sequence, is_time_like
from tsmigrate.planning.plan import make_plan
from tsmigrate.schema import (
    BINARY,
    DOUBLE,
    INTEGER,
    LOCAL,
    STRING,
    AccessPattern,
    AttributeColumn,
    Catalog,
    DefinedColumn,
    PrimaryKeyColumn,
    SearchField,
    SearchIndex,
    SecondaryIndex,
    Table,
    TableOptions,
)
from tsmigrate.schema.discover import import_models
from tsmigrate.schema.model import compile_models

REPO = Path(__file__).resolve().parents[2]


def pk(name: str, type_: str = STRING, derivation=None) -> PrimaryKeyColumn:
    return PrimaryKeyColumn(name, type_, derivation=derivation)


def table(*key: PrimaryKeyColumn, name: str = "t", **changes) -> Table:
    return Table(name=name, primary_key=key or [pk("user_id")], **changes)


def found(code: str, *tables: Table) -> list[Finding]:
    return [f for f in run_lint(Catalog(tables)) if f.code == code]


def planned(code: str, live: Catalog, target: Catalog, *, prune: bool = False) -> list[Finding]:
    plan = make_plan(live, target, prune=prune)
    return [f for f in run_lint(target, live=live, plan=plan) if f.code == code]


def step_kind(live: Catalog, target: Catalog, finding: Finding, *, prune: bool = False) -> str:
    """The kind of the plan step a finding points at."""
    return make_plan(live, target, prune=prune).steps[finding.step - 1].kind


# --- name heuristics -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ts", "timestamp", "day", "created_at", "createdAt", "event_time",
                                  "log_hour", "gmt_create", "posted_on", "PaidAt"])
def test_time_like_names(name):
    assert is_time_like(name)


@pytest.mark.parametrize("name", ["time_zone", "birth_date", "expires_at", "format", "keyword",
                                  "device_id", "request_id", "day_of_week"])
def test_names_that_only_mention_time(name):
    assert not is_time_like(name)


def test_sequences_ids_and_few_values():
    assert all(map(is_sequence, ["seq", "counter", "order_no", "OrderNumber", "invoice_number"]))
    assert not any(map(is_sequence, ["order_id", "phone_number", "card_number"]))
    assert all(map(has_few_values, ["status", "order_type", "CountryCode", "region_id", "hour_of_day"]))
    assert not any(map(has_few_values, ["tenant_id", "user_id", "statusline", "date_of_birth"]))


def test_payload_and_money_names_look_at_the_head_word():
    assert all(map(is_payload, ["payload", "response_body", "raw_html", "attachments", "json"]))
    assert not any(map(is_payload, ["payload_key", "image_url", "file_name", "content_type"]))
    assert all(map(is_money, ["price", "total_fee", "unit_price", "balance", "credits"]))
    assert not any(map(is_money, ["tax_rate", "price_cents", "total_count", "battery_charge"]))


# --- TS-PK303 monotonic partition key -----------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "cure"),
    [
        ([pk("ts", INTEGER), pk("machine_ip")], "TimeBucket('ts'"),
        ([pk("day"), pk("keyword")], "TimeBucket('day'"),
        ([pk("OrderNumber", INTEGER)], "HashPrefix('OrderNumber'"),
        ([pk("k", derivation=Concat(["day", "user"])), pk("n", INTEGER)], "TimeBucket('day'"),
        ([pk("k", INTEGER, Descending("created_at")), pk("id")], "TimeBucket('created_at'"),
    ],
)
def test_pk303_time_or_sequence_first(key, cure):
    [finding] = found("TS-PK303", table(*key))
    assert finding.severity == "warning"
    assert finding.field == f"primary_key.{key[0].name}"
    assert cure in finding.fix


@pytest.mark.parametrize(
    "key",
    [
        [pk("machine_ip"), pk("ts", INTEGER)],  # the seed's fix: the spreading column first
        [pk("keyword"), pk("day"), pk("request_id")],  # day is time-like, but not first
        [pk("b", INTEGER, TimeBucket("ts")), pk("ts", INTEGER)],
        [pk("h", derivation=HashPrefix("OrderNumber")), pk("OrderNumber", INTEGER)],
    ],
)
def test_pk303_spread_keys_are_clean(key):
    assert found("TS-PK303", table(*key)) == []


# --- TS-PK304 low-cardinality partition key -----------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        [pk("status"), pk("user_id")],
        [pk("region_id", INTEGER), pk("ts", INTEGER)],
        [pk("h", derivation=HashPrefix("status")), pk("user_id")],  # a hash of few values
        [pk("b", INTEGER, TimeBucket("ts", buckets=2)), pk("ts", INTEGER)],
    ],
)
def test_pk304_few_partition_key_values(key):
    [finding] = found("TS-PK304", table(*key))
    assert finding.severity == "warning"
    assert "one partition" in finding.message


@pytest.mark.parametrize(
    "key",
    [
        [pk("status")],  # a lookup table: one row per value
        [pk("user_id"), pk("status")],
        [pk("tenant_id"), pk("user_id")],
        [pk("b", INTEGER, TimeBucket("ts", buckets=16)), pk("ts", INTEGER)],
        [pk("k", derivation=Concat(["status", "user_id"])), pk("n", INTEGER)],
    ],
)
def test_pk304_clean(key):
    assert found("TS-PK304", table(*key)) == []


# --- TS-PK305 sequential id ---------------------------------------------------------------------


def test_pk305_integer_id_first_is_advised_a_hash_prefix():
    [finding] = found("TS-PK305", table(pk("user_id", INTEGER), pk("ts", INTEGER)))
    assert finding.severity == "info"
    assert "HashPrefix('user_id'" in finding.fix


@pytest.mark.parametrize(
    "key",
    [
        [pk("user_id"), pk("ts", INTEGER)],  # a string id (uuid, ...)
        [pk("h", derivation=HashPrefix("user_id")), pk("ts", INTEGER)],
        [pk("OrderNumber", INTEGER)],  # a sequence: TS-PK303's
        [pk("amount", INTEGER), pk("user_id", INTEGER)],
        [pk("region_id", INTEGER), pk("user_id")],  # few values: TS-PK304's
    ],
)
def test_pk305_clean(key):
    assert found("TS-PK305", table(*key)) == []


# --- TS-PK306 concatenated key order ------------------------------------------------------------


def _concat_table(concat: Concat, **columns: str) -> Table:
    return table(
        pk("k", derivation=concat), pk("n", INTEGER),
        attributes=[AttributeColumn(name, type_) for name, type_ in columns.items()],
    )


@pytest.mark.parametrize(
    ("concat", "columns", "says"),
    [
        (Concat(["DeviceID", "SellerID"]), {"DeviceID": INTEGER, "SellerID": STRING},
         "integer field 'DeviceID' has no zero padding"),
        (Concat(["a", "b"], pad={"a": 6}), {"a": STRING, "b": STRING}, "pad is given for 'a'"),
        (Concat(["a", "b"]), {"a": DOUBLE, "b": STRING}, "'a' is DOUBLE"),
        (Concat(["a", "b"], sep=":", alphabet="alnum"), {"a": STRING, "b": STRING},
         "separator ':' does not sort below '0'"),
        (Concat(["a", "b"], sep="|", alphabet=""), {"a": STRING, "b": STRING},
         "separator '|' does not sort below '!'"),
    ],
)
def test_pk306_concat_that_does_not_keep_order(concat, columns, says):
    [finding] = found("TS-PK306", _concat_table(concat, **columns))
    assert finding.severity == "error"
    assert says in finding.message


def test_pk306_padded_concat_is_clean():
    concat = Concat(["DeviceID", "SellerID", "CardID"], sep=",", pad={"DeviceID": 6})
    clean = _concat_table(concat, DeviceID=INTEGER, SellerID=STRING, CardID=STRING)
    assert found("TS-PK306", clean) == []


def test_pk306_on_a_compiled_model():
    class Unpadded(Model, table="unpadded"):
        device_key = PrimaryKey(str, derive=Concat(["device", "seller"]))
        order_number = PrimaryKey(int)
        device = Column(int)
        seller = Column(str)

    [finding] = found("TS-PK306", *compile_models([Unpadded]).tables)
    assert finding.model.endswith("Unpadded")


# --- TS-PK301 rewrite ---------------------------------------------------------------------------


def test_pk301_rewrite_step_says_what_the_copy_does():
    """Issue #38 (9): the copy writes each cell with its original timestamp (it is what the
    engine does, not a risk for the user to handle), and the finding says so."""
    old = table(pk("request_id"), name="serp_v1", options=TableOptions(time_to_live=30 * DAY))
    new = table(pk("keyword"), pk("request_id"), name="serp_v2", replaces="serp_v1",
                options=TableOptions(time_to_live=30 * DAY, max_versions=2))
    live, target = Catalog([old]), Catalog([new])
    [finding] = planned("TS-PK301", live, target)
    assert finding.severity == "info"
    assert step_kind(live, target, finding) == "rewrite_table"
    assert "each with its original timestamp, so TTL counts from the original write" in finding.message
    assert "max_time_deviation of serp_v2 is widened for the copy" in finding.message
    assert "the newest 2 versions of each cell" in finding.message
    assert "must" not in finding.message and "To check" not in finding.message
    assert "quiet period" not in finding.fix and "tsmigrate rewrite switch serp_v2" in finding.fix


def test_pk301_names_versions_the_new_table_does_not_keep():
    old = table(pk("request_id"), name="serp_v1", options=TableOptions(max_versions=3))
    new = table(pk("keyword"), pk("request_id"), name="serp_v2", replaces="serp_v1")
    [finding] = planned("TS-PK301", Catalog([old]), Catalog([new]))
    assert finding.message.endswith(
        "To check: serp_v1 keeps 3 versions and serp_v2 1: the older versions are not copied")


def test_pk301_only_on_rewrites():
    live = Catalog([table(pk("a"), name="x")])
    assert planned("TS-PK301", live, Catalog([table(pk("a"), name="x", options=TableOptions(
        max_versions=2))])) == []
    assert found("TS-PK301", table(pk("a"), replaces="x")) == []  # no plan, no rewrite


# --- TS-CL701 / TS-CL702 columns ----------------------------------------------------------------


def test_cl701_large_payload_attributes():
    flagged = table(
        attributes=[AttributeColumn("response_body", STRING)],
        defined_columns=[DefinedColumn("raw_html", BINARY)],
    )
    findings = found("TS-CL701", flagged)
    assert [f.field for f in findings] == ["raw_html", "response_body"]
    assert all("OSS" in f.fix for f in findings)


PAYLOAD_HEADS = ["payload", "body", "content", "html", "xml", "raw", "response", "document", "doc",
                 "blob", "image", "file", "attachment", "snapshot", "json"]
PLURALS = {"documents": "document", "responses": "response", "snapshots": "snapshot",
           "blobs": "blob", "bodies": "body", "payloads": "payload", "contents": "content",
           "docs": "doc", "images": "image", "files": "file", "attachments": "attachment"}


@pytest.mark.parametrize("name", [*PAYLOAD_HEADS, *PLURALS, "raw_responses", "pageBodies"])
def test_cl701_every_documented_word_and_its_plural(name: str):
    findings = found("TS-CL701", table(attributes=[AttributeColumn(name, STRING)]))
    assert [f.field for f in findings] == [name]


@pytest.mark.parametrize("name", ["bodies_key", "documents_url", "responses_count", "status",
                                  "address", "process", "series", "bodyguards"])
def test_cl701_plurals_of_other_words_are_clean(name: str):
    assert found("TS-CL701", table(attributes=[AttributeColumn(name, STRING)])) == []


def test_cl701_pointers_and_suppression_are_clean():
    pointers = table(attributes=[AttributeColumn("payload_key", STRING),
                                 AttributeColumn("file_name", STRING),
                                 AttributeColumn("content", INTEGER)])
    assert found("TS-CL701", pointers) == []
    kept = table(attributes=[AttributeColumn("payload", STRING)],
                 lint_ignore={"TS-CL701": "kept verbatim to replay parsing"})
    assert found("TS-CL701", kept) == []
    assert len(found("TS-CL701", attrs.evolve(kept, lint_ignore={}))) == 1


def test_cl702_money_in_double():
    flagged = table(attributes=[AttributeColumn("price", DOUBLE), AttributeColumn("total_fee", DOUBLE)])
    findings = found("TS-CL702", flagged)
    assert [f.field for f in findings] == ["price", "total_fee"]
    assert "price_fen" in findings[0].fix


def test_cl702_integer_minor_units_and_other_doubles_are_clean():
    clean = table(attributes=[AttributeColumn("price_fen", INTEGER), AttributeColumn("temp_c", DOUBLE),
                              AttributeColumn("tax_rate", DOUBLE), AttributeColumn("amount", INTEGER)])
    assert found("TS-CL702", clean) == []


# --- TS-IX401 / TS-IX402 / TS-IX403 indexes -----------------------------------------------------


def test_ix401_index_prerequisites_from_validation():
    versioned = events(options=TableOptions(max_versions=3))
    findings = found("TS-IX401", versioned)
    assert {f.severity for f in findings} == {"error"}
    assert "[secondary-index.max-versions]" in " ".join(f.message for f in findings)
    assert "[search-index.max-versions]" in " ".join(f.message for f in findings)
    assert found("TS-IX401", events()) == []


def test_ix402_index_limits_from_validation():
    many = events(search_indexes=(), secondary_indexes=[
        SecondaryIndex(f"events_by_user_{n}", ["user"]) for n in range(6)
    ])
    assert [f.message.split("[")[-1] for f in found("TS-IX402", many)] == ["secondary-index.count]"]
    local = events(search_indexes=(), secondary_indexes=[SecondaryIndex("by_user", ["user"], type=LOCAL)])
    [finding] = found("TS-IX402", local)
    assert "[secondary-index.local-partition-key]" in finding.message
    assert found("TS-IX402", events()) == []


def test_ix_mapping_is_explicit_and_leaves_names_to_validation():
    assert not PREREQUISITES & LIMITS
    badly_named = events(secondary_indexes=[SecondaryIndex("bad-name", ["user"])])
    assert found("TS-IX401", badly_named) + found("TS-IX402", badly_named) == []


def test_ix403_search_index_rebuilt_instead_of_reindexed():
    taken = SearchIndex("events_search_reindex", [SearchField("score", "LONG")], time_to_live=30 * DAY)
    live = Catalog([events(search_indexes=[*events().search_indexes, taken])])
    changed = SearchIndex("events_search", [SearchField("score", "LONG", sort_and_agg=True),
                                            SearchField("user", "KEYWORD")], time_to_live=30 * DAY)
    target = Catalog([events(search_indexes=[changed, taken])])
    [finding] = planned("TS-IX403", live, target)
    assert finding.severity == "warning"
    assert step_kind(live, target, finding) == "drop_search_index"
    assert "another search index named events_search_reindex" in finding.message
    assert "free the name events_search_reindex" in finding.fix
    # Reindexable: no finding, the plan reindexes.
    assert planned("TS-IX403", Catalog([events()]), Catalog([events(search_indexes=[changed])])) == []


def test_ix403_not_for_a_plain_drop_or_a_ttl_change():
    live = Catalog([events()])
    assert planned("TS-IX403", live, Catalog([events(search_indexes=())])) == []
    longer = events(options=TableOptions(time_to_live=60 * DAY, allow_update=False),
                    search_indexes=[attrs.evolve(events().search_indexes[0], time_to_live=60 * DAY)])
    assert planned("TS-IX403", live, Catalog([longer])) == []


# --- TS-DS1xx / TS-VT201 changes ----------------------------------------------------------------


def test_ds101_drop_table():
    live = Catalog([events(), table(name="old")])
    target = Catalog([events()])
    [finding] = planned("TS-DS101", live, target, prune=True)
    assert finding.severity == "error"
    assert finding.table == "old"
    assert step_kind(live, target, finding, prune=True) == "drop_table"
    assert planned("TS-DS101", live, target) == []  # undeclared but not pruned: kept


def test_ds102_drop_secondary_index_but_not_a_replaced_one():
    live = Catalog([events()])
    [finding] = planned("TS-DS102", live, Catalog([events(secondary_indexes=())]))
    assert finding.field == "index events_by_user"
    assert step_kind(live, Catalog([events(secondary_indexes=())]), finding) == "drop_index"
    changed = events(secondary_indexes=[SecondaryIndex("events_by_user", ["user", "score"])])
    assert planned("TS-DS102", live, Catalog([changed])) == []


def test_ds103_drop_search_index_but_not_replaced_or_with_its_table():
    live = Catalog([events()])
    target = Catalog([events(search_indexes=())])
    [finding] = planned("TS-DS103", live, target)
    assert step_kind(live, target, finding) == "drop_search_index"
    changed = SearchIndex("events_search", [SearchField("score", "LONG")], time_to_live=30 * DAY)
    assert planned("TS-DS103", live, Catalog([events(search_indexes=[changed])])) == []
    assert planned("TS-DS103", live, Catalog(), prune=True) == []  # TS-DS101 covers it


def test_ds104_defined_column_removed_while_an_index_uses_it():
    live = Catalog([events()])
    retyped = events(defined_columns=[DefinedColumn("user", INTEGER), DefinedColumn("score", INTEGER)])
    [finding] = planned("TS-DS104", live, Catalog([retyped]))
    assert finding.field == "user"
    assert "index events_by_user" in finding.message
    assert step_kind(live, Catalog([retyped]), finding) == "delete_defined_columns"


def test_ds104_access_pattern_and_unused_column():
    base = table(pk("id"), defined_columns=[DefinedColumn("status", STRING), DefinedColumn("note", STRING)],
                 search_indexes=[SearchIndex("by_status", [SearchField("status", "KEYWORD")])],
                 access_patterns=[AccessPattern("by_status", eq=["status"])])
    demoted = attrs.evolve(base, defined_columns=[DefinedColumn("note", STRING)],
                           attributes=[AttributeColumn("status", STRING)])
    [finding] = planned("TS-DS104", Catalog([base]), Catalog([demoted]))
    assert "access pattern by_status" in finding.message
    assert "undeclared attribute" in finding.message
    unused_gone = attrs.evolve(base, defined_columns=[DefinedColumn("status", STRING)])
    assert planned("TS-DS104", Catalog([base]), Catalog([unused_gone])) == []


def _options(**options) -> Table:
    return table(pk("id"), options=TableOptions(**options))


def test_ds105_lower_ttl():
    live, target = Catalog([_options(time_to_live=30 * DAY)]), Catalog([_options(time_to_live=7 * DAY)])
    [finding] = planned("TS-DS105", live, target)
    assert "30d to 7d" in finding.message
    assert step_kind(live, target, finding) == "update_options"
    assert planned("TS-DS105", target, live) == []  # raising is not a loss
    assert len(planned("TS-DS105", Catalog([_options()]), target)) == 1  # forever -> 7d


def test_ds105_lower_search_index_ttl():
    live = Catalog([events()])
    shorter = events(search_indexes=[attrs.evolve(events().search_indexes[0], time_to_live=7 * DAY)])
    [finding] = planned("TS-DS105", live, Catalog([shorter]))
    assert finding.field == "search index events_search"


def test_ds106_and_vt201_max_versions():
    three, one = Catalog([_options(max_versions=3)]), Catalog([_options(max_versions=1)])
    [lowered] = planned("TS-DS106", three, one)
    assert "3 to 1" in lowered.message
    assert planned("TS-VT201", three, one) == []
    [raised] = planned("TS-VT201", one, three)
    assert raised.severity == "warning"
    assert "readable again" in raised.message
    assert planned("TS-DS106", one, three) == []


def test_change_rules_need_a_plan():
    codes = {"TS-DS101", "TS-DS102", "TS-DS103", "TS-DS104", "TS-DS105", "TS-DS106", "TS-VT201",
             "TS-IX403", "TS-PK301"}
    assert [f for f in run_lint(Catalog([events()])) if f.code in codes] == []


# --- TS-AP502 / TS-AP503 tables -----------------------------------------------------------------


def test_ap502_updates_on_a_table_that_rejects_them():
    [finding] = found("TS-AP502", table(writes="update", options=TableOptions(allow_update=False)))
    assert finding.severity == "error"
    assert "allow_update=True" in finding.fix
    [indexed] = found("TS-AP502", events(writes="update"))  # TTL + indexes need allow_update=False
    assert "PutRow" in indexed.fix
    assert "allow_update=True" not in indexed.fix


def test_ap502_clean():
    assert found("TS-AP502", events()) == []  # writes whole rows
    assert found("TS-AP502", table(writes="update")) == []


def test_ap503_family_of_monthly_tables():
    months = [table(pk("keyword"), pk("day"), name=f"serp_snapshots_2026{m}") for m in ("08", "09", "10")]
    [finding] = found("TS-AP503", *months)
    assert finding.table == "serp_snapshots_202610"
    assert "serp_snapshots" in finding.message
    assert "ttl=" in finding.fix


def test_ap503_one_dated_table_with_a_time_range():
    ranged = table(pk("keyword"), pk("day"), name="serp_2026_09",
                   access_patterns=[AccessPattern("over_days", eq=["keyword"], range="day")])
    [finding] = found("TS-AP503", ranged)
    assert finding.field == "access pattern over_days"


@pytest.mark.parametrize(
    "tables",
    [
        [table(pk("keyword"), pk("day"), name="serp_snapshots",
               access_patterns=[AccessPattern("over_days", eq=["keyword"], range="day")])],
        [table(pk("keyword"), name="serp_202609", access_patterns=[AccessPattern("k", eq=["keyword"])])],
        [table(name="sensor_123456"), table(name="sensor_123457")],  # not dates
        [table(name="events_2026_13"), table(name="events_2026_14")],
    ],
)
def test_ap503_clean(tables):
    assert found("TS-AP503", *tables) == []


# --- the docs page and the example models -------------------------------------------------------


def _sections() -> dict[str, str]:
    text = (REPO / "docs" / "lint.md").read_text()
    parts = re.split(r"^## (TS-[A-Z]{2}\d{3})\b.*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_registered_code_has_a_docs_section_with_its_severity():
    sections = _sections()
    assert sorted(sections) == sorted(RULES)
    for code, registered in RULES.items():
        section = sections[code]
        assert f"Default severity: **{registered.severity}**" in section, code
        assert "Bad" in section and "Good" in section, code


def test_example_models_are_clean_but_for_suppressions_with_reasons():
    catalog = compile_models(import_models(["models"], REPO))
    assert run_lint(catalog) == []
    unsuppressed = Catalog([attrs.evolve(t, lint_ignore={}) for t in catalog.tables])
    raised = {(f.table, f.code) for f in run_lint(unsuppressed)}
    ignored = {(t.name, code) for t in catalog.tables for code, _ in t.lint_ignore}
    assert raised <= ignored
    assert all(reason.strip() for t in catalog.tables for _, reason in t.lint_ignore)


def test_lint_command_flags_plural_payloads(tmp_path, monkeypatch):
    """The words the issue found unflagged, through `tsmigrate lint` as a user runs it."""
    from click.testing import CliRunner

    from tsmigrate.cli import main

    plurals = ["documents", "responses", "snapshots", "blobs", "bodies"]
    (tmp_path / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["pm"]\n')
    (tmp_path / "pm.py").write_text(
        "from tsmigrate import Column, Model, PrimaryKey\n"
        "class Crawl(Model, table='crawl'):\n"
        "    url = PrimaryKey(str)\n"
        + "".join(f"    {name} = Column(str)\n" for name in plurals)
    )
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["lint", "--format", "json"])
    assert result.exit_code == 0, result.output  # warnings only
    flagged = sorted(f["field"] for f in json.loads(result.output) if f["code"] == "TS-CL701")
    assert flagged == sorted(plurals)
