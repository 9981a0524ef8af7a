"""The key transform: natural values, new keys, cells that move, errors, encoded pages."""

from __future__ import annotations

import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsmigrate.contract.transform import RowTransform, TransformError
from tsmigrate.keys import ALPHABETS, Concat, Descending, HashPrefix, TimeBucket
from tsmigrate.schema import AttributeColumn, DefinedColumn, PrimaryKeyColumn, Table
from tsmigrate.wire.plainbuffer import assemble_row, encode_cell, encode_primary_key_cells, join_rows

SETTINGS = settings(max_examples=120, deadline=None)

# Telemetry keyed by a hashed device id, rewritten to be keyed by (device_id, newest first).
HASHED = Table(
    "telemetry",
    [PrimaryKeyColumn("pk", "STRING", derivation=HashPrefix("device_id", 4, "|")),
     PrimaryKeyColumn("ts", "INTEGER")],
    defined_columns=[DefinedColumn("battery", "INTEGER")],
)
BY_DEVICE = Table(
    "telemetry_v2",
    [PrimaryKeyColumn("device_id", "STRING"),
     PrimaryKeyColumn("rts", "INTEGER", derivation=Descending("ts"))],
    defined_columns=[DefinedColumn("battery", "INTEGER")],
)
# Card records rewritten from four plain key columns to a concatenated partition key.
CARDS = Table(
    "card_consumption",
    [PrimaryKeyColumn("CardID", "STRING"), PrimaryKeyColumn("DeviceID", "INTEGER"),
     PrimaryKeyColumn("SellerID", "STRING"), PrimaryKeyColumn("OrderNumber", "INTEGER")],
)
CARDS_BY_DEVICE = Table(
    "card_consumption_by_device",
    [PrimaryKeyColumn("device_key", "STRING",
                      derivation=Concat(["DeviceID", "SellerID", "CardID"], pad={"DeviceID": 6})),
     PrimaryKeyColumn("OrderNumber", "INTEGER")],
    attributes=[AttributeColumn("DeviceID", "INTEGER"), AttributeColumn("SellerID", "STRING"),
                AttributeColumn("CardID", "STRING")],
)


def test_a_hash_prefixed_key_gives_back_its_device_id() -> None:
    transform = RowTransform.build(HASHED, BY_DEVICE)
    key = HashPrefix("device_id", 4, "|").derive({"device_id": "dev-1"})
    row = transform.apply([("pk", key), ("ts", 1000)], [("battery", 80, 1000)])
    assert row.primary_key == [("device_id", "dev-1"), ("rts", 2**63 - 1 - 1000)]
    assert row.columns == [("battery", 80, 1000)]
    assert transform.source_key_of(row.primary_key, row.columns) == [("pk", key), ("ts", 1000)]


def test_columns_leaving_the_key_become_attributes_with_every_version_kept() -> None:
    transform = RowTransform.build(CARDS, CARDS_BY_DEVICE)
    source_key = [("CardID", "c7"), ("DeviceID", 42), ("SellerID", "a100"), ("OrderNumber", 5)]
    cells = [("AmountFen", 300, 2000), ("AmountFen", 250, 1000), ("PaidAt", 99, 1500)]
    row = transform.apply(source_key, cells)
    assert row.primary_key == [("device_key", "000042,a100,c7"), ("OrderNumber", 5)]
    # Declared as target columns: they become attributes, stamped like the newest cell.
    assert row.columns == [
        ("AmountFen", 300, 2000), ("AmountFen", 250, 1000),
        ("CardID", "c7", 2000), ("DeviceID", 42, 2000), ("PaidAt", 99, 1500), ("SellerID", "a100", 2000),
    ]
    assert transform.source_key_of(row.primary_key, row.columns) == source_key


def test_attributes_entering_the_key_leave_the_attributes() -> None:
    source = Table("t", [PrimaryKeyColumn("id", "STRING")])
    target = Table("t2", [PrimaryKeyColumn("region", "STRING"), PrimaryKeyColumn("id", "STRING")])
    transform = RowTransform.build(source, target)
    assert transform.key_sources == {"region"}
    row = transform.apply([("id", "x")], [("name", "n", 7), ("region", "eu", 9), ("region", "us", 3)])
    assert row.primary_key == [("region", "eu"), ("id", "x")]  # the newest version
    assert row.columns == [("name", "n", 7)]


def test_a_key_only_row_gets_the_jobs_timestamp_for_cells_from_its_old_key() -> None:
    source = Table("t", [PrimaryKeyColumn("a", "STRING"), PrimaryKeyColumn("b", "INTEGER")])
    target = Table("t2", [PrimaryKeyColumn("b", "INTEGER")])
    transform = RowTransform.build(source, target, default_timestamp=1234)
    assert transform.apply([("a", "x"), ("b", 1)], []).columns == [("a", "x", 1234)]


def test_a_row_missing_a_column_of_the_new_key_names_the_source_key() -> None:
    source = Table("t", [PrimaryKeyColumn("id", "STRING")])
    target = Table("t2", [PrimaryKeyColumn("region", "STRING"), PrimaryKeyColumn("id", "STRING")])
    with pytest.raises(TransformError, match=r"source row \(id='x'\) of table 't'.*'region'"):
        RowTransform.build(source, target).apply([("id", "x")], [("name", "n", 7)])


def test_a_value_the_derivation_rejects_names_the_source_key() -> None:
    source = Table("t", [PrimaryKeyColumn("id", "STRING"), PrimaryKeyColumn("n", "INTEGER")])
    target = Table("t2", [PrimaryKeyColumn("k", "STRING", derivation=Concat(["id", "n"], pad={"n": 3}))])
    with pytest.raises(TransformError, match=r"\(id='x', n=5000\).*does not fit 3 digits"):
        RowTransform.build(source, target).apply([("id", "x"), ("n", 5000)], [])


def test_a_wrong_type_for_the_new_key_is_refused() -> None:
    source = Table("t", [PrimaryKeyColumn("id", "STRING")])
    target = Table("t2", [PrimaryKeyColumn("n", "INTEGER"), PrimaryKeyColumn("id", "STRING")])
    with pytest.raises(TransformError, match="'n' is INTEGER"):
        RowTransform.build(source, target).apply([("id", "x")], [("n", "seven", 1)])


def test_a_source_key_its_derivation_did_not_build_is_an_error() -> None:
    with pytest.raises(TransformError, match=r"source row \(pk='ab12\|dev-1', ts=1\)"):
        RowTransform.build(HASHED, BY_DEVICE).apply([("pk", "ab12|dev-1"), ("ts", 1)], [])


def test_a_time_bucket_is_recomputed_from_its_source() -> None:
    source = Table("t", [PrimaryKeyColumn("b", "INTEGER", derivation=TimeBucket("ts", 4)),
                         PrimaryKeyColumn("ts", "INTEGER")])
    target = Table("t2", [PrimaryKeyColumn("ts", "INTEGER")])
    transform = RowTransform.build(source, target)
    assert transform.apply([("b", 7 % 4), ("ts", 7)], []).primary_key == [("ts", 7)]
    with pytest.raises(TransformError, match="not time_bucket"):
        transform.apply([("b", 0), ("ts", 7)], [])
    back = RowTransform.build(target, source)
    assert back.apply([("ts", 7)], []).primary_key == [("b", 3), ("ts", 7)]


def test_a_custom_function_that_raises_names_the_row(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).parent))
    source = Table("t", [PrimaryKeyColumn("id", "STRING")])
    target = Table("t2", [PrimaryKeyColumn("id", "STRING")])
    transform = RowTransform.build(source, target, custom="tests_custom_transform:upper")
    assert transform.apply([("id", "ab")], []).primary_key == [("id", "AB")]
    with pytest.raises(TransformError, match=r"\(id='boom'\).*custom transform raised"):
        transform.apply([("id", "boom")], [])


# --- the byte path equals the object path --------------------------------------------------------

_TEXT = st.text(ALPHABETS["identifier"], min_size=1, max_size=8)
_VALUE = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=10), st.booleans(),
                   st.floats(allow_nan=False), st.binary(max_size=6))
_CELLS = st.lists(
    st.tuples(st.sampled_from(["AmountFen", "PaidAt", "note", "z"]), _VALUE, st.integers(0, 2**40)),
    max_size=6,
).map(lambda cells: sorted(cells, key=lambda c: (c[0], -c[2])))
CASES = [(HASHED, BY_DEVICE), (BY_DEVICE, HASHED), (CARDS, CARDS_BY_DEVICE), (CARDS_BY_DEVICE, CARDS)]


def _source_row(draw, table: Table) -> list[tuple[str, object]]:
    natural = {"device_id": draw(_TEXT), "ts": draw(st.integers(0, 2**62)),
               "CardID": draw(_TEXT), "DeviceID": draw(st.integers(0, 999_999)),
               "SellerID": draw(_TEXT), "OrderNumber": draw(st.integers(-5, 10**12))}
    return [(c.name, c.derivation.derive(natural) if c.derivation else natural[c.name])
            for c in table.primary_key]


def _page(rows) -> bytes:
    encoded = []
    for pk, cells in rows:
        pk_bytes, crcs = encode_primary_key_cells(pk)
        encoded.append(assemble_row(pk_bytes, crcs, [encode_cell(*c) for c in cells]))
    return join_rows(encoded)


@SETTINGS
@given(st.sampled_from(CASES), st.data())
@pytest.mark.slow
def test_a_page_transforms_like_each_of_its_rows(case, data) -> None:
    source, target = case
    transform = RowTransform.build(source, target, default_timestamp=77)
    rows = [(_source_row(data.draw, source), data.draw(_CELLS)) for _ in range(data.draw(st.integers(0, 4)))]
    page = transform.page(_page(rows))
    expected = [RowTransform.encode(transform.apply(pk, cells)) for pk, cells in rows]
    assert page.rows == [row for row, _ in expected]
    assert page.digest == sum(d for _, d in expected) % 2**128
    for pk, cells in rows:  # and every target row tells its source key
        target_row = transform.apply(pk, cells)
        assert transform.source_key_of(target_row.primary_key, target_row.columns) == pk
