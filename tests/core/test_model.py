"""Declarative models: compiling to the IR, declaration mistakes, inheritance and the row API.

Models register themselves when defined, so test models are defined inside the tests and
compiled explicitly with ``compile_models``.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from tsmigrate import (
    AccessPattern,
    Column,
    GlobalIndex,
    LocalIndex,
    Model,
    PrimaryKey,
    SearchField,
    SearchIndex,
)
from tsmigrate.errors import KeyDerivationError, Problem, SchemaError
from tsmigrate.keys import Concat, HashPrefix, TimeBucket
from tsmigrate.schema import (
    ASC,
    DESC,
    AttributeColumn,
    DefinedColumn,
    IndexSorter,
    PrimaryKeyColumn,
    SecondaryIndex,
    StreamSpec,
    Table,
)
from tsmigrate.schema import (
    AccessPattern as AccessPatternIR,
)
from tsmigrate.schema.discover import import_models
from tsmigrate.schema.model import AUTO_INCREMENT, compile_models, parse_duration, registered_models

REPO = Path(__file__).resolve().parents[2]
DAY = 86400


@pytest.fixture(scope="module")
def examples() -> dict[str, type[Model]]:
    """The example models of ``models/``, by class name."""
    return {m.__name__: m for m in import_models(["models"], REPO)}


@pytest.fixture(scope="module")
def catalog(examples):
    return compile_models(examples.values())


def problems(*models: type[Model]) -> list[Problem]:
    with pytest.raises(SchemaError) as caught:
        compile_models(models)
    return list(caught.value.problems)


def only(found: list[Problem], rule: str) -> Problem:
    matching = [p for p in found if p.rule == rule]
    assert len(matching) == 1, found
    return matching[0]


# --- the example models --------------------------------------------------------------------------


def test_examples_compile_to_the_expected_tables(catalog) -> None:
    assert [t.name for t in catalog.tables] == [
        "card_consumption",
        "card_consumption_by_device",
        "serp_snapshots",
        "telemetry",
    ]


def test_telemetry_is_keyed_by_a_hash_prefixed_device(catalog) -> None:
    table = catalog.table("telemetry")
    assert table.primary_key == (
        PrimaryKeyColumn("pk", "STRING", derivation=HashPrefix("device_id", length=4, sep="|")),
        PrimaryKeyColumn("ts", "INTEGER"),
    )
    assert table.defined_columns == (
        DefinedColumn("battery", "INTEGER"),
        DefinedColumn("device_id", "STRING"),
        DefinedColumn("serial", "STRING"),
    )
    assert table.attributes == (AttributeColumn("temp_c", "DOUBLE"),)
    assert table.options.time_to_live == 90 * DAY
    assert table.options.allow_update is False
    assert table.options.max_versions == 1
    assert table.secondary_indexes == (SecondaryIndex("by_serial", ["serial"], ["battery"]),)
    (search,) = table.search_indexes
    assert search.name == "alerts"
    assert [(f.name, f.type, f.sort_and_agg) for f in search.fields] == [
        ("battery", "LONG", False),
        ("ts", "LONG", True),
    ]
    assert search.time_to_live == table.options.time_to_live  # expires with its table
    assert AccessPatternIR("latest_for_device", ["device_id"], None, "-ts") in table.access_patterns
    assert table.source == "models.telemetry.Telemetry"


def test_serp_is_keyed_by_keyword_day_request_with_a_lookup_by_request(catalog) -> None:
    table = catalog.table("serp_snapshots")
    assert table.primary_key_names == ("keyword", "day", "request_id")
    assert {c.type for c in table.primary_key} == {"STRING"}
    index = next(i for i in table.secondary_indexes if i.name == "by_request_id")
    assert index.type == "GLOBAL"
    assert index.keys == ("request_id",)
    assert index.include == ("credits", "status")
    assert index.primary_key(table) == ("request_id", "keyword", "day")
    by_status = next(i for i in table.secondary_indexes if i.name == "by_status")
    assert by_status.keys == ("status", "day") and by_status.include == ("credits",)
    assert table.column_type("payload") == "STRING"


def test_card_consumption_is_keyed_card_device_seller_order(catalog) -> None:
    table = catalog.table("card_consumption")
    assert [(c.name, c.type) for c in table.primary_key] == [
        ("CardID", "STRING"),
        ("DeviceID", "INTEGER"),
        ("SellerID", "STRING"),
        ("OrderNumber", "INTEGER"),
    ]
    by_device = catalog.table("card_consumption_by_device")
    (device_key, order) = by_device.primary_key
    assert device_key.derivation == Concat(["DeviceID", "SellerID", "CardID"], sep=",", pad={"DeviceID": 6})
    assert device_key.derivation.problems() == []
    assert order.name == "OrderNumber"


def test_example_rows_build_their_keys(examples) -> None:
    telemetry = examples["Telemetry"](device_id="dev-1", ts=5)
    prefix = hashlib.md5(b"dev-1").hexdigest()[:4]
    assert telemetry.primary_key() == [("pk", f"{prefix}|dev-1"), ("ts", 5)]
    by_device = examples["CardConsumptionByDevice"](
        device_id=54, seller_id="a100", card_id="c1", order_number=7
    )
    assert by_device.primary_key() == [("device_key", "000054,a100,c1"), ("OrderNumber", 7)]
    card = examples["CardConsumption"](card_id="c1", device_id=54, seller_id="a100", order_number=7)
    assert card.primary_key() == [
        ("CardID", "c1"),
        ("DeviceID", 54),
        ("SellerID", "a100"),
        ("OrderNumber", 7),
    ]


# --- compiling -----------------------------------------------------------------------------------


def test_primary_key_order_is_declaration_order() -> None:
    class Events(Model, table="events"):
        zeta = PrimaryKey(str)
        alpha = PrimaryKey(int)
        beta = PrimaryKey(bytes)

    table = compile_models([Events]).tables[0]
    assert [(c.name, c.type) for c in table.primary_key] == [
        ("zeta", "STRING"),
        ("alpha", "INTEGER"),
        ("beta", "BINARY"),
    ]


def test_column_types_and_physical_names() -> None:
    class Things(Model):  # table name defaults to the class name in snake_case
        thing_id = PrimaryKey("integer", name="ThingID")
        label = Column(str, defined=True, name="Label")
        weight = Column(float)
        active = Column(bool)
        blob = Column(bytes)
        count = Column("INTEGER")

    table = compile_models([Things]).tables[0]
    assert table.name == "things"
    assert table.primary_key == (PrimaryKeyColumn("ThingID", "INTEGER"),)
    assert table.defined_columns == (DefinedColumn("Label", "STRING"),)
    assert {(c.name, c.type) for c in table.attributes} == {
        ("weight", "DOUBLE"),
        ("active", "BOOLEAN"),
        ("blob", "BINARY"),
        ("count", "INTEGER"),
    }


def test_snake_case_table_names() -> None:
    class DeviceReadingV2(Model):
        pk = PrimaryKey(str)

    assert DeviceReadingV2.table_name() == "device_reading_v2"


def test_options_compile_to_table_options() -> None:
    class Tuned(Model, table="tuned", ttl="12h", max_versions=3, max_time_deviation="2d",
                reserved_read=10, reserved_write=20, stream="48h"):  # fmt: skip
        pk = PrimaryKey(str)

    with pytest.raises(SchemaError) as caught:  # 12 h is below Tablestore's one-day minimum
        compile_models([Tuned])
    (problem,) = caught.value.problems
    assert (problem.rule, problem.field) == ("options.ttl", "ttl")

    class Tuned2(Model, table="tuned2", ttl="2w", max_versions=3, max_time_deviation="2d",
                 reserved_read=10, reserved_write=20, stream="48h"):  # fmt: skip
        pk = PrimaryKey(str)

    table = compile_models([Tuned2]).tables[0]
    assert table.options.time_to_live == 14 * DAY
    assert table.options.max_versions == 3
    assert table.options.max_time_deviation == 2 * DAY
    assert (table.throughput.read, table.throughput.write) == (10, 20)
    assert table.stream == StreamSpec(enabled=True, expiration_hours=48)


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (True, StreamSpec(True, 24)),
        (False, StreamSpec()),
        (None, StreamSpec()),
        ("7d", StreamSpec(True, 168)),
    ],
)
def test_stream_option(option, expected) -> None:
    class Streamed(Model, table="streamed", stream=option):
        pk = PrimaryKey(str)

    assert compile_models([Streamed]).tables[0].stream == expected


def test_indexes_search_and_access_patterns_compile() -> None:
    class Orders(Model, table="orders_ix", ttl="30d", allow_update=False):
        shop = PrimaryKey(str)
        order_id = PrimaryKey(int)
        status = Column(str, defined=True)
        total = Column(int, defined=True)
        note = Column(str)
        by_status = GlobalIndex(keys=["status"], include=["total"], include_base_data=False)
        recent = LocalIndex(keys=["shop", "status"], name="orders_recent")
        search = SearchIndex(
            fields=[
                SearchField("note", "text", analyzer="max_word"),
                SearchField("total", "long", sort=True),
                SearchField("status", "keyword", array=True),
            ],
            routing=["shop"],
            presort=["-total", "pk"],
            ttl="7d",
        )
        per_shop = AccessPattern(eq="shop", range="order_id", order_by="-order_id")

    table = compile_models([Orders]).tables[0]
    by_status, recent = table.secondary_indexes
    assert (by_status.name, by_status.type, by_status.include_base_data) == ("by_status", "GLOBAL", False)
    assert (recent.name, recent.type, recent.keys) == ("orders_recent", "LOCAL", ("shop", "status"))
    (search,) = table.search_indexes
    assert search.routing_fields == ("shop",)
    assert search.index_sort == (IndexSorter("total", DESC), IndexSorter(None, ASC))
    assert search.time_to_live == 7 * DAY
    assert [f.name for f in search.fields] == ["note", "status", "total"]
    assert search.fields[0].analyzer == "max_word"
    assert search.fields[1].is_array
    assert table.access_patterns == (AccessPatternIR("per_shop", ["shop"], "order_id", "-order_id"),)


def test_model_table_is_validated_and_cached() -> None:
    class Cached(Model, table="cached"):
        pk = PrimaryKey(str)

    table = Cached.table()
    assert isinstance(table, Table) and table.name == "cached"
    assert Cached.table() is table

    class Broken(Model, table="broken_cached"):
        pk = PrimaryKey(float)

    with pytest.raises(SchemaError):
        Broken.table()


# --- declaration mistakes ------------------------------------------------------------------------


def test_float_primary_key_is_reported_with_model_and_field() -> None:
    class Prices(Model, table="prices"):
        item = PrimaryKey(str)
        price = PrimaryKey(float)

    problem = only(problems(Prices), "primary-key.type")
    assert problem.field == "price"
    assert problem.model.endswith("test_float_primary_key_is_reported_with_model_and_field.<locals>.Prices")
    assert problem.table == "prices"
    assert "DOUBLE is an invalid type for the primary key" in str(problem)


def test_index_naming_a_missing_column() -> None:
    class Users(Model, table="users_missing"):
        uid = PrimaryKey(str)
        email = Column(str, defined=True)
        by_mail = GlobalIndex(keys=["mail"])

    problem = only(problems(Users), "secondary-index.unknown-column")
    assert problem.field == "index by_mail"
    assert "'mail'" in problem.message
    assert problem.model.endswith(".Users")


def test_index_on_a_column_that_is_not_defined_says_how_to_fix_it() -> None:
    class Users(Model, table="users_undefined"):
        uid = PrimaryKey(str)
        email = Column(str)
        by_email = GlobalIndex(keys=["email"])

    problem = only(problems(Users), "secondary-index.unknown-column")
    assert "defined=True" in problem.fix


def test_unknown_class_option() -> None:
    class Colourful(Model, table="colourful", colour="red"):
        pk = PrimaryKey(str)

    problem = only(problems(Colourful), "model.option")
    assert problem.field == "model"
    assert "'colour'" in problem.message
    assert "ttl" in problem.fix


@pytest.mark.parametrize("ttl", ["ninety days", "90x", "-5d", True, [90]])
def test_bad_ttl(ttl) -> None:
    class Expiring(Model, table="expiring", ttl=ttl):
        pk = PrimaryKey(str)

    problem = only(problems(Expiring), "model.ttl")
    assert problem.field == "ttl"
    assert problem.model.endswith(".Expiring")


@pytest.mark.parametrize(
    ("option", "value", "rule"),
    [
        ("max_versions", "2", "model.max_versions"),
        ("reserved_read", 1.5, "model.reserved_read"),
        ("reserved_write", True, "model.reserved_write"),
        ("max_time_deviation", "soon", "model.max_time_deviation"),
        ("stream", "90m", "model.stream"),
        ("allow_update", "no", "model.allow_update"),
    ],
)
def test_bad_option_values(option, value, rule) -> None:
    Odd = type(Model)(
        "Odd", (Model,), {"pk": PrimaryKey(str), "__module__": __name__}, table="odd", **{option: value}
    )
    problem = only(problems(Odd), rule)
    assert problem.field == option


@pytest.mark.parametrize(
    "name", ["values", "key", "table", "compile", "declarations", "from_row", "table_name"]
)
def test_field_named_like_a_model_method(name: str) -> None:
    body = {"pk": PrimaryKey(str), name: Column(str), "__module__": __name__}
    Clash = type(Model)("Clash", (Model,), body, table="clash")
    problem = only(problems(Clash), "model.reserved-name")
    assert problem.field == name
    assert f"name={name!r}" in problem.fix
    assert callable(getattr(Clash, name))  # the Model API still works on the class


def test_a_column_can_keep_a_reserved_name_physically() -> None:
    class Keyed(Model, table="keyed"):
        pk = PrimaryKey(str)
        key_ = Column(str, defined=True, name="key")

    assert compile_models([Keyed]).tables[0].defined_columns == (DefinedColumn("key", "STRING"),)


def test_derive_must_be_a_derivation() -> None:
    class Derived(Model, table="derived_bad"):
        pk = PrimaryKey(str, derive="device_id")
        device_id = Column(str)

    problem = only(problems(Derived), "model.derive")
    assert problem.field == "pk"


def test_bad_search_index_declarations_are_problems() -> None:
    class Searched(Model, table="searched_bad"):
        pk = PrimaryKey(str)
        tag = Column(str)
        by_tag = SearchIndex(fields=["tag"], ttl="whenever")

    found = problems(Searched)
    assert only(found, "model.search-field").field == "search index by_tag"
    assert only(found, "model.ttl").field == "search index by_tag"


def test_search_index_forever_on_an_expiring_table() -> None:
    class Logs(Model, table="logs_forever", ttl="30d", allow_update=False):
        pk = PrimaryKey(str)
        level = Column(str)
        search = SearchIndex(fields=[SearchField("level", "keyword")], ttl=None)

    assert only(problems(Logs), "search-index.ttl-above-table").field == "search index search"


def test_model_without_primary_key() -> None:
    class Keyless(Model, table="keyless"):
        value = Column(str)

    found = problems(Keyless)
    assert {p.rule for p in found} == {"primary-key.count"}
    assert all(p.field == "primary_key" for p in found)


def test_every_problem_of_every_model_is_reported_at_once() -> None:
    class A(Model, table="a_bad", colour="red"):
        pk = PrimaryKey(float)
        by_x = GlobalIndex(keys=["x"])

    class B(Model, table="b_bad", ttl="1h"):
        pk = PrimaryKey(str)
        values = Column(str)

    found = problems(A, B)
    assert {(p.model.rsplit(".", 1)[-1], p.rule) for p in found} >= {
        ("A", "model.option"),
        ("A", "primary-key.type"),
        ("A", "secondary-index.unknown-column"),
        ("B", "options.ttl"),
        ("B", "model.reserved-name"),
    }


def test_two_models_with_the_same_table_name() -> None:
    class One(Model, table="same_name"):
        pk = PrimaryKey(str)

    class Two(Model, table="same_name"):
        pk = PrimaryKey(str)

    problem = only(problems(One, Two), "name.instance-unique")
    assert problem.field == "table"
    # Both models are named, not the table twice.
    assert re.search(r"used by model \S+\.One and model \S+\.Two", problem.message), problem.message
    assert problem.model.endswith((".One", ".Two"))
    assert "table=" in problem.fix


# --- inheritance ---------------------------------------------------------------------------------


def test_fields_and_options_are_inherited_from_an_abstract_base() -> None:
    class Tenanted(Model, abstract=True, ttl="30d", allow_update=False, table="ignored"):
        tenant = PrimaryKey(str)
        created = Column(int, defined=True)

    class Invoice(Tenanted, table="invoices"):
        invoice_id = PrimaryKey(int)
        total = Column(int)

    class Receipt(Tenanted):
        receipt_id = PrimaryKey(str)

    assert Tenanted not in registered_models()
    assert Invoice in registered_models() and Receipt in registered_models()
    invoices, receipts = sorted(compile_models([Invoice, Receipt]).tables, key=lambda t: t.name)
    assert invoices.name == "invoices"
    assert receipts.name == "receipt"  # a base's table= is not inherited
    assert invoices.primary_key_names == ("tenant", "invoice_id")  # base fields first
    assert receipts.primary_key_names == ("tenant", "receipt_id")
    assert invoices.defined_columns == receipts.defined_columns == (DefinedColumn("created", "INTEGER"),)
    assert invoices.attributes == (AttributeColumn("total", "INTEGER"),)
    assert invoices.options.time_to_live == receipts.options.time_to_live == 30 * DAY
    assert invoices.options.allow_update is False
    assert Invoice(tenant="t1", invoice_id=3).primary_key() == [("tenant", "t1"), ("invoice_id", 3)]


def test_an_override_keeps_the_base_position() -> None:
    class Base(Model, abstract=True):
        a = PrimaryKey(str)
        b = PrimaryKey(str)

    class Child(Base, table="override_child"):
        a = PrimaryKey(int)  # same place in the key, new type

    table = compile_models([Child]).tables[0]
    assert [(c.name, c.type) for c in table.primary_key] == [("a", "INTEGER"), ("b", "STRING")]


def test_an_abstract_base_compiles_no_table_but_its_problems_show_in_children() -> None:
    class Base(Model, abstract=True, shade="blue"):
        pk = PrimaryKey(str)

    class Child(Base, table="child_of_odd"):
        value = Column(str)

    assert compile_models([Child]).tables[0].name == "child_of_odd"
    assert only(problems(Base), "model.option").model.endswith(".Base")


# --- rows ----------------------------------------------------------------------------------------


def test_primary_key_uses_the_hash_prefix(examples) -> None:
    Telemetry = examples["Telemetry"]
    row = Telemetry(device_id="dev-1", ts=5)
    expected = [("pk", hashlib.md5(b"dev-1").hexdigest()[:4] + "|dev-1"), ("ts", 5)]
    assert row.primary_key() == expected
    assert Telemetry.key(device_id="dev-1", ts=5) == expected


def test_attribute_columns_are_the_set_columns(examples) -> None:
    row = examples["Telemetry"](device_id="dev-1", ts=5, battery=80, temp_c=None)
    assert row.attribute_columns() == [("device_id", "dev-1"), ("battery", 80)]
    assert row.serial is None  # declared but not set


def test_from_row_round_trip(examples) -> None:
    Serp = examples["SerpSnapshot"]
    row = Serp(keyword="tablestore", day="2026-09-21", request_id="r1", status="ok", credits=3, payload="{}")
    again = Serp.from_row(row.primary_key(), row.attribute_columns())
    assert again == row
    # attribute cells as the SDK returns them carry a timestamp
    cells = [(name, value, 1_700_000_000_000) for name, value in row.attribute_columns()]
    assert Serp.from_row(row.primary_key(), cells) == row


def test_from_row_keeps_derived_keys_as_read(examples) -> None:
    Telemetry = examples["Telemetry"]
    row = Telemetry(device_id="dev-1", ts=5, serial="S1", battery=99, temp_c=21.5)
    again = Telemetry.from_row(row.primary_key(), row.attribute_columns())
    assert again.pk == row.primary_key()[0][1]
    assert again.primary_key() == row.primary_key()
    assert again.attribute_columns() == row.attribute_columns()
    assert again.values() == {**row.values(), "pk": row.primary_key()[0][1]}


def test_from_row_maps_physical_column_names(examples) -> None:
    Card = examples["CardConsumption"]
    key = [("CardID", "c1"), ("DeviceID", 54), ("SellerID", "a100"), ("OrderNumber", 7)]
    row = Card.from_row(key, [("AmountFen", 1250), ("PaidAt", 1_700_000_000_000), ("Unknown", 1)])
    assert (row.card_id, row.device_id, row.amount_fen) == ("c1", 54, 1250)
    assert row.primary_key() == key
    assert ("AmountFen", 1250) in row.attribute_columns()


def test_unknown_fields_raise_type_error(examples) -> None:
    with pytest.raises(TypeError, match="no field 'colour'"):
        examples["Telemetry"](device_id="d", colour="red")


def test_missing_key_fields() -> None:
    class Seq(Model, table="seq_rows"):
        tenant = PrimaryKey(str)
        seq = PrimaryKey(int, auto_increment=True)
        bucket = PrimaryKey(int, derive=TimeBucket("at", 4))
        at = Column(int)

    assert Seq(tenant="t", at=7).primary_key() == [("tenant", "t"), ("seq", AUTO_INCREMENT), ("bucket", 3)]
    assert Seq(tenant="t", seq=9, at=8).primary_key() == [("tenant", "t"), ("seq", 9), ("bucket", 0)]
    with pytest.raises(KeyDerivationError, match="'tenant' is missing"):
        Seq(at=7).primary_key()
    with pytest.raises(KeyDerivationError, match="'at'"):
        Seq(tenant="t").primary_key()


def test_rows_are_values() -> None:
    class Point(Model, table="points"):
        pk = PrimaryKey(str)
        x = Column(int)

    assert Point(pk="a", x=1) == Point(pk="a", x=1)
    assert Point(pk="a", x=1) != Point(pk="a", x=2)
    assert repr(Point(pk="a", x=1)) == "Point(pk='a', x=1)"
    with pytest.raises(TypeError):
        hash(Point(pk="a"))


# --- durations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, -1),
        (-1, -1),
        ("forever", -1),
        ("Never", -1),
        ("90d", 90 * DAY),
        ("2w", 14 * DAY),
        ("12h", 43200),
        ("30m", 1800),
        ("45s", 45),
        (" 7 d ", 7 * DAY),
        ("86400", 86400),
        (86400, 86400),
    ],
)
def test_parse_duration(value, seconds: int) -> None:
    assert parse_duration(value) == seconds


def test_parse_duration_in_units() -> None:
    assert parse_duration("2d", 3600) == 48
    with pytest.raises(ValueError, match="whole number"):
        parse_duration("90m", 3600)


@pytest.mark.parametrize("value", ["soon", "1.5d", "d", True, "5y"])
def test_parse_duration_rejects(value) -> None:
    with pytest.raises(ValueError):
        parse_duration(value)


@pytest.mark.parametrize(("ttl", "seconds"), [
    ("90d", 90 * 86400), ("2w", 14 * 86400), ("36h", 36 * 3600), (86400, 86400), (None, -1),
])
def test_readme_ttl_formats_validate(ttl, seconds) -> None:
    """The TTL forms the README lists compile and pass validation."""
    class Kept(Model, table="kept", ttl=ttl):
        pk = PrimaryKey(str)

    assert compile_models([Kept]).table("kept").options.time_to_live == seconds


def test_a_ttl_under_a_day_is_refused_with_the_minimum() -> None:
    class Short(Model, table="short", ttl="12h"):
        pk = PrimaryKey(str)

    with pytest.raises(SchemaError) as refused:
        compile_models([Short])
    assert "one day or more" in refused.value.problems[0].fix
