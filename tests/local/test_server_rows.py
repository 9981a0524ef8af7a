"""Row APIs of the local server through the official SDK."""

from __future__ import annotations

import time

import pytest
from tablestore import (
    INF_MAX,
    INF_MIN,
    PK_AUTO_INCR,
    BatchGetRowRequest,
    BatchWriteRowRequest,
    CapacityUnit,
    ComparatorType,
    CompositeColumnCondition,
    Condition,
    DeleteRowItem,
    LogicalOperator,
    OTSClient,
    OTSServiceError,
    PutRowItem,
    ReservedThroughput,
    ReturnType,
    Row,
    RowExistenceExpectation,
    SingleColumnCondition,
    TableInBatchGetRowItem,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
    UpdateRowItem,
)

from tsmigrate.local.testing import LocalTablestore

CU0 = ReservedThroughput(CapacityUnit(0, 0))
EXIST = Condition(RowExistenceExpectation.EXPECT_EXIST)
NOT_EXIST = Condition(RowExistenceExpectation.EXPECT_NOT_EXIST)
FULL = ([("k", INF_MIN), ("n", INF_MIN)], [("k", INF_MAX), ("n", INF_MAX)])


def make_table(client: OTSClient, name: str = "t", options: TableOptions | None = None, pk=None) -> None:  # type: ignore[no-untyped-def]
    pk = pk or [("k", "STRING"), ("n", "INTEGER")]
    client.create_table(TableMeta(name, pk), options or TableOptions(), CU0)


def error_of(call, *args, **kwargs) -> OTSServiceError:  # type: ignore[no-untyped-def]
    with pytest.raises(OTSServiceError) as info:
        call(*args, **kwargs)
    return info.value


def attrs(row: Row | None) -> dict[str, object]:
    assert row is not None
    return {c[0]: c[1] for c in row.attribute_columns}


def put_many(client: OTSClient, table: str, keys: range, key: str = "a") -> None:
    for start in range(keys.start, keys.stop, 200):
        items = [
            PutRowItem(Row([("k", key), ("n", i)], [("v", i), ("even", i % 2 == 0)]), Condition("IGNORE"))
            for i in range(start, min(start + 200, keys.stop))
        ]
        request = BatchWriteRowRequest()
        request.add(TableInBatchWriteRowItem(table, items))
        assert client.batch_write_row(request).is_all_succeed()


def test_put_get_all_types(ots_client: OTSClient) -> None:
    make_table(ots_client)
    columns = [
        ("s", "héllo"),
        ("i", -7),
        ("d", 2.5),
        ("b", False),
        ("bin", bytearray(b"\x00\x01")),
        ("e", ""),
    ]
    ots_client.put_row("t", Row([("k", "x"), ("n", 1)], columns))
    _, row, _ = ots_client.get_row("t", [("k", "x"), ("n", 1)], max_version=1)
    assert row.primary_key == [("k", "x"), ("n", 1)]
    # Columns come back sorted by name, each with its timestamp.
    assert [c[:2] for c in row.attribute_columns] == sorted(columns)
    assert all(abs(c[2] - time.time() * 1000) < 60_000 for c in row.attribute_columns)
    _, missing, _ = ots_client.get_row("t", [("k", "x"), ("n", 2)], max_version=1)
    assert missing is None


def test_columns_to_get(ots_client: OTSClient) -> None:
    make_table(ots_client)
    ots_client.put_row("t", Row([("k", "x"), ("n", 1)], [("a", 1), ("b", 2)]))
    ots_client.put_row("t", Row([("k", "x"), ("n", 2)], [("b", 3)]))
    _, row, _ = ots_client.get_row("t", [("k", "x"), ("n", 1)], ["a", "k"], max_version=1)
    assert row.primary_key == [("k", "x")] and attrs(row) == {"a": 1}
    _, row, _ = ots_client.get_row("t", [("k", "x"), ("n", 2)], ["a"], max_version=1)
    assert row is None  # none of the requested columns exists
    _, next_pk, rows, _ = ots_client.get_range("t", "FORWARD", *FULL, columns_to_get=["a"], max_version=1)
    assert next_pk is None
    assert [(r.primary_key, attrs(r)) for r in rows] == [([("k", "x"), ("n", 1)], {"a": 1})]


def test_attribute_columns_to_get_return_the_whole_key(ots_client: OTSClient) -> None:
    """As the service (and the Java SDK, which rejects a row without its key) expects: naming
    only attribute columns still gives every row its full primary key, in every read API."""
    make_table(ots_client)
    pk = [("k", "x"), ("n", 1)]
    ots_client.put_row("t", Row(pk, [("a", 1), ("b", 2)]))
    _, row, _ = ots_client.get_row("t", pk, ["b"], max_version=1)
    assert row.primary_key == pk and attrs(row) == {"b": 2}
    request = BatchGetRowRequest()
    request.add(TableInBatchGetRowItem("t", [pk, [("k", "x"), ("n", 9)]], ["a"], None, 1))
    result = ots_client.batch_get_row(request).get_result_by_table("t")
    assert result[0].row.primary_key == pk and attrs(result[0].row) == {"a": 1}
    assert result[1].is_ok and result[1].row is None
    _, _, rows, _ = ots_client.get_range("t", "FORWARD", *FULL, columns_to_get=["nope"], max_version=1)
    assert rows == []


def test_write_capacity_units_count_names_and_values(ots_client: OTSClient) -> None:
    """The service meters the logical size (names plus values), not the encoding: a row of
    4,090 bytes is one CU although its encoding is larger."""
    make_table(ots_client, pk=[("PK0", "STRING")])
    pk = [("PK0", "x")]  # 4 bytes
    columns = [("col0", "X" * (4090 - 4 - 4))]  # 4 + 4082: 4,090 bytes with the key
    cu, _ = ots_client.update_row("t", Row(pk, {"put": columns}), Condition("IGNORE"))
    assert (cu.read, cu.write) == (0, 1)
    cu, _ = ots_client.put_row("t", Row(pk, [("col0", "X" * 4082), ("c1", "VWXYZ")]))
    assert (cu.read, cu.write) == (0, 2)  # 4,090 + 2 + 5 bytes: past 4 KB
    cu, _, _ = ots_client.get_row("t", pk, max_version=1)
    assert (cu.read, cu.write) == (2, 0)
    cu, _, _ = ots_client.get_row("t", pk, ["c1"], max_version=1)
    assert (cu.read, cu.write) == (1, 0)
    cu, _, _ = ots_client.get_row("t", [("PK0", "missing")], max_version=1)
    assert (cu.read, cu.write) == (1, 0)
    # Integers and doubles are 8 bytes, booleans 1.
    cu, _ = ots_client.put_row("t", Row(pk, [("i", 1), ("d", 1.5), ("b", True), ("s", "X" * 4064)]))
    assert cu.write == 1  # 4 + 9 + 9 + 2 + 4065 = 4089


def test_conditions_cost_one_read(ots_client: OTSClient) -> None:
    make_table(ots_client)
    pk = [("k", "x"), ("n", 1)]
    cu, _ = ots_client.put_row("t", Row(pk, [("a", 1)]))
    assert (cu.read, cu.write) == (0, 1)
    cu, _ = ots_client.put_row("t", Row(pk, [("a", 2)]), EXIST)
    assert (cu.read, cu.write) == (1, 1)
    on_column = Condition("IGNORE", SingleColumnCondition("a", 2, ComparatorType.EQUAL))
    cu, _ = ots_client.update_row("t", Row(pk, {"put": [("a", 3)]}), on_column)
    assert (cu.read, cu.write) == (1, 1)
    cu, _ = ots_client.delete_row("t", Row(pk), Condition("IGNORE"))
    assert (cu.read, cu.write) == (0, 1)


def test_row_existence_conditions(ots_client: OTSClient) -> None:
    make_table(ots_client)
    pk = [("k", "x"), ("n", 1)]
    e = error_of(ots_client.put_row, "t", Row(pk, [("a", 1)]), EXIST)
    assert (e.http_status, e.code, e.message) == (403, "OTSConditionCheckFail", "Condition check failed.")
    ots_client.put_row("t", Row(pk, [("a", 1)]), NOT_EXIST)
    assert error_of(ots_client.put_row, "t", Row(pk, [("a", 2)]), NOT_EXIST).code == "OTSConditionCheckFail"
    ots_client.put_row("t", Row(pk, [("a", 3)]), EXIST)
    assert attrs(ots_client.get_row("t", pk, max_version=1)[1]) == {"a": 3}
    assert (
        error_of(ots_client.update_row, "t", Row(pk, {"put": [("a", 4)]}), NOT_EXIST).code
        == "OTSConditionCheckFail"
    )
    assert (
        error_of(ots_client.delete_row, "t", Row([("k", "x"), ("n", 9)]), EXIST).code
        == "OTSConditionCheckFail"
    )
    ots_client.delete_row("t", Row(pk), EXIST)
    assert ots_client.get_row("t", pk, max_version=1)[1] is None


def test_column_conditions(ots_client: OTSClient) -> None:
    make_table(ots_client)
    pk = [("k", "x"), ("n", 1)]
    ots_client.put_row("t", Row(pk, [("state", "new"), ("qty", 5)]))
    cond = Condition("IGNORE", SingleColumnCondition("state", "paid", ComparatorType.EQUAL))
    assert error_of(ots_client.update_row, "t", Row(pk, {"put": [("state", "shipped")]}), cond).code == (
        "OTSConditionCheckFail"
    )
    both = CompositeColumnCondition(LogicalOperator.AND)
    both.add_sub_condition(SingleColumnCondition("state", "new", ComparatorType.EQUAL))
    both.add_sub_condition(SingleColumnCondition("qty", 3, ComparatorType.GREATER_THAN))
    ots_client.update_row("t", Row(pk, {"put": [("state", "paid")]}), Condition("EXPECT_EXIST", both))
    assert attrs(ots_client.get_row("t", pk, max_version=1)[1])["state"] == "paid"
    # A missing column passes unless pass_if_missing is False.
    lax = Condition("IGNORE", SingleColumnCondition("nope", 1, ComparatorType.EQUAL))
    strict = Condition(
        "IGNORE", SingleColumnCondition("nope", 1, ComparatorType.EQUAL, pass_if_missing=False)
    )
    ots_client.put_row("t", Row(pk, [("qty", 1)]), lax)
    assert error_of(ots_client.put_row, "t", Row(pk, [("qty", 2)]), strict).code == "OTSConditionCheckFail"


def test_update_operations(ots_client: OTSClient) -> None:
    make_table(ots_client, options=TableOptions(max_version=5))
    pk = [("k", "x"), ("n", 1)]
    now = int(time.time() * 1000)
    # `cnt` is written a second ago: the increment below then makes a second version whatever the
    # clock does (a version is its timestamp: two writes in one millisecond make one version).
    row = Row(pk, [("a", 1, now - 3000), ("a", 2, now - 2000), ("b", "x"), ("cnt", 10, now - 1000)])
    ots_client.put_row("t", row)
    ots_client.update_row(
        "t",
        Row(
            pk,
            {
                "delete": [("a", None, now - 3000)],
                "delete_all": ["b"],
                "increment": [("cnt", 5)],
                "put": [("c", 1.5)],
            },
        ),
        Condition("IGNORE"),
    )
    _, row, _ = ots_client.get_row("t", pk, max_version=5)
    assert [(c[0], c[1]) for c in row.attribute_columns] == [("a", 2), ("c", 1.5), ("cnt", 15), ("cnt", 10)]
    ots_client.update_row("t", Row(pk, {"increment": [("fresh", 3)]}), Condition("IGNORE"))
    assert attrs(ots_client.get_row("t", pk, max_version=1)[1])["fresh"] == 3
    e = error_of(ots_client.update_row, "t", Row(pk, {"increment": [("c", 1)]}), Condition("IGNORE"))
    assert e.code == "OTSParameterInvalid"
    # UpdateRow upserts, but a delete-only update of an absent row creates nothing.
    ots_client.update_row("t", Row([("k", "y"), ("n", 1)], {"put": [("a", 1)]}), Condition("IGNORE"))
    assert ots_client.get_row("t", [("k", "y"), ("n", 1)], max_version=1)[1] is not None
    ots_client.update_row("t", Row([("k", "z"), ("n", 1)], {"delete_all": ["a"]}), Condition("IGNORE"))
    assert ots_client.get_row("t", [("k", "z"), ("n", 1)], max_version=1)[1] is None
    e = error_of(
        ots_client.update_row, "t", Row(pk, {"put": [("a", 1)], "delete_all": ["a"]}), Condition("IGNORE")
    )
    assert e.message == "Duplicated attribute column name: 'a' while updating row."


def test_versions_and_time_range(ots_client: OTSClient) -> None:
    make_table(ots_client, options=TableOptions(max_version=3))
    pk = [("k", "x"), ("n", 1)]
    base = int(time.time() * 1000) - 10_000
    for i in range(5):
        ots_client.update_row("t", Row(pk, {"put": [("a", i, base + i)]}), Condition("IGNORE"))
    _, row, _ = ots_client.get_row("t", pk, max_version=10)
    assert [(c[1], c[2]) for c in row.attribute_columns] == [(4, base + 4), (3, base + 3), (2, base + 2)]
    _, row, _ = ots_client.get_row("t", pk, max_version=None, time_range=(base + 2, base + 4))
    assert [c[1] for c in row.attribute_columns] == [3, 2]
    _, row, _ = ots_client.get_row("t", pk, max_version=None, time_range=base + 3)
    assert [c[1] for c in row.attribute_columns] == [3]
    e = error_of(ots_client.get_row, "t", pk, max_version=None)
    assert e.message == "No version condition is specified while querying row."


def test_ttl_and_time_deviation(ots_instance: LocalTablestore, ots_server_options) -> None:  # type: ignore[no-untyped-def]
    client = ots_instance.client()
    make_table(client, options=TableOptions(time_to_live=86400, max_time_deviation=100_000))
    pk = [("k", "x"), ("n", 1)]
    now = int(time.time() * 1000)
    # Written 2 s before it expires: visible now, gone once the server's clock moves 3 s on.
    client.put_row("t", Row(pk, [("old", 1, now - 86_398_000), ("new", 2)]))
    assert attrs(client.get_row("t", pk, max_version=1)[1]) == {"old": 1, "new": 2}
    ots_server_options.latency_ms = 0
    ots_instance.server.clock_offset = 3.0
    assert attrs(client.get_row("t", pk, max_version=1)[1]) == {"new": 2}
    ots_instance.server.clock_offset = 86_400.0 + 60
    assert client.get_row("t", pk, max_version=1)[1] is None
    assert client.get_range("t", "FORWARD", *FULL, max_version=1)[2] == []
    ots_instance.server.clock_offset = 0.0
    # Outside [now - min(TTL, deviation), now + deviation) a timestamp is refused.
    e = error_of(client.put_row, "t", Row(pk, [("c", 1, now - 90_000_000)]))
    assert (e.code, e.message) == ("OTSParameterInvalid", "Invalid timestamp. Cell:c.")
    e = error_of(client.put_row, "t", Row(pk, [("c", 1, now + 200_000_000)]))
    assert e.message == "Invalid timestamp. Cell:c."
    # The write path checks a row's oldest and newest timestamps first: the cell out of range
    # is still the one named, among cells in range, first or last.
    for cells in ([("a", 1, now - 1000), ("b", 2, now + 200_000_000), ("c", 3, now)],
                  [("a", 1, now - 90_000_000), ("b", 2, now - 1000)]):
        bad = next(name for name, _, ts in cells if not now - 86_400_000 <= ts < now + 100_000_000)
        e = error_of(client.put_row, "t", Row(pk, cells))
        assert e.message == f"Invalid timestamp. Cell:{bad}."


def test_allow_update_false(ots_client: OTSClient) -> None:
    make_table(ots_client, options=TableOptions(allow_update=False))
    pk = [("k", "x"), ("n", 1)]
    ots_client.put_row("t", Row(pk, [("a", 1)]))
    e = error_of(ots_client.update_row, "t", Row(pk, {"put": [("a", 2)]}), Condition("IGNORE"))
    assert e.code == "OTSParameterInvalid"
    assert attrs(ots_client.get_row("t", pk, max_version=1)[1]) == {"a": 1}


def test_auto_increment_returns_increasing_keys(ots_client: OTSClient) -> None:
    make_table(ots_client, pk=[("p", "STRING"), ("id", "INTEGER", PK_AUTO_INCR)])
    ids = []
    for i in range(5):
        _, row = ots_client.put_row(
            "t", Row([("p", "a"), ("id", PK_AUTO_INCR)], [("i", i)]), return_type=ReturnType.RT_PK
        )
        assert row.primary_key[0] == ("p", "a")
        ids.append(row.primary_key[1][1])
    assert ids == sorted(set(ids))
    _, _, rows, _ = ots_client.get_range(
        "t", "FORWARD", [("p", INF_MIN), ("id", INF_MIN)], [("p", INF_MAX), ("id", INF_MAX)], max_version=1
    )
    assert [r.primary_key[1][1] for r in rows] == ids
    e = error_of(ots_client.put_row, "t", Row([("p", "a"), ("id", PK_AUTO_INCR)], [("i", 1)]), EXIST)
    assert e.message == "Invalid expect:EXPECT_EXIST when modify row with pk auto increment."
    e = error_of(ots_client.get_row, "t", [("p", "a"), ("id", PK_AUTO_INCR)], max_version=1)
    assert e.message == "PKAutoIncr can't be used for read operations."


def test_primary_key_errors(ots_client: OTSClient) -> None:
    make_table(ots_client)
    e = error_of(ots_client.put_row, "t", Row([("k", "x")], [("a", 1)]))
    assert (e.http_status, e.code, e.message) == (
        400,
        "OTSInvalidPK",
        "Validate PK size fail. Input: 1, Meta: 2.",
    )
    e = error_of(ots_client.get_row, "t", [("k", "x"), ("m", 1)], max_version=1)
    assert (e.code, e.message) == ("OTSInvalidPK", "Validate PK name fail. Input: m, Meta: n.")
    e = error_of(ots_client.get_row, "t", [("k", 1), ("n", 1)], max_version=1)
    assert e.code == "OTSInvalidPK"
    e = error_of(ots_client.put_row, "t", Row([("k", "x" * 1025), ("n", 1)], [("a", 1)]))
    assert (
        e.message
        == "The length of primary key column: 'k' exceeds the MaxLength:1024 with CurrentLength:1025."
    )
    e = error_of(ots_client.put_row, "t", Row([("k", "x"), ("n", 1)], [("bad-name", 1)]))
    assert e.message == "Invalid column name: 'bad-name'."
    e = error_of(ots_client.put_row, "t", Row([("k", "x"), ("n", 1)], [("d", float("nan"))]))
    assert e.message == "NaN can't be set to double value."
    assert error_of(ots_client.put_row, "nope", Row([("k", "x"), ("n", 1)], [])).code == "OTSObjectNotExist"


def test_get_range_pages_both_directions(ots_client: OTSClient) -> None:
    make_table(ots_client)
    put_many(ots_client, "t", range(25))
    put_many(ots_client, "t", range(3), key="b")
    seen, next_pk, pages = [], FULL[0], 0
    while next_pk is not None:
        _, next_pk, rows, _ = ots_client.get_range("t", "FORWARD", next_pk, FULL[1], limit=7, max_version=1)
        seen += [tuple(v for _, v in r.primary_key) for r in rows]
        pages += 1
    assert pages == 4 and seen == [("a", i) for i in range(25)] + [("b", i) for i in range(3)]
    backward, next_pk, pages = [], [("k", "a"), ("n", 20)], 0
    while next_pk is not None:
        _, next_pk, rows, _ = ots_client.get_range(
            "t", "BACKWARD", next_pk, [("k", "a"), ("n", 4)], limit=6, max_version=1
        )
        backward += [r.primary_key[1][1] for r in rows]
        pages += 1
    assert pages == 3 and backward == list(range(20, 4, -1))
    _, next_pk, rows, _ = ots_client.get_range(
        "t", "FORWARD", [("k", "a"), ("n", INF_MAX)], [("k", "b"), ("n", INF_MAX)], max_version=1
    )
    assert next_pk is None and len(rows) == 3
    e = error_of(ots_client.get_range, "t", "FORWARD", FULL[1], FULL[0], max_version=1)
    assert e.message == "Begin key must less than end key in FORWARD"
    e = error_of(ots_client.get_range, "t", "BACKWARD", *FULL, max_version=1)
    assert e.message == "Begin key must more than end key in BACKWARD"
    e = error_of(ots_client.get_range, "t", "FORWARD", *FULL, limit=0, max_version=1)
    assert e.message == "The limit must be greater than 0."


@pytest.mark.slow
def test_get_range_pages_of_5000_and_filters(ots_client: OTSClient) -> None:
    make_table(ots_client)
    put_many(ots_client, "t", range(5200))
    _, next_pk, rows, _ = ots_client.get_range("t", "FORWARD", *FULL, max_version=1)
    assert len(rows) == 5000 and next_pk == [("k", "a"), ("n", 5000)]
    # The filter runs after the read: the first page scans 5000 rows and may come back short.
    rare = SingleColumnCondition("v", 4990, ComparatorType.GREATER_EQUAL)
    _, next_pk, rows, _ = ots_client.get_range("t", "FORWARD", *FULL, column_filter=rare, max_version=1)
    assert [attrs(r)["v"] for r in rows] == list(range(4990, 5000)) and next_pk == [("k", "a"), ("n", 5000)]
    _, next_pk, rows, _ = ots_client.get_range(
        "t", "FORWARD", next_pk, FULL[1], column_filter=rare, max_version=1
    )
    assert len(rows) == 200 and next_pk is None
    even = SingleColumnCondition("even", True, ComparatorType.EQUAL)
    _, _, rows, _ = ots_client.get_range(
        "t", "BACKWARD", FULL[1], FULL[0], limit=3, column_filter=even, max_version=1
    )
    assert [attrs(r)["v"] for r in rows] == [5198, 5196, 5194]


def test_batch_write_with_one_bad_row(ots_client: OTSClient) -> None:
    make_table(ots_client)
    make_table(ots_client, "u", pk=[("id", "INTEGER")])
    ots_client.put_row("t", Row([("k", "old"), ("n", 1)], [("a", 1)]))
    request = BatchWriteRowRequest()
    request.add(
        TableInBatchWriteRowItem(
            "t",
            [
                PutRowItem(Row([("k", "p"), ("n", 1)], [("a", 1)]), Condition("IGNORE")),
                PutRowItem(Row([("k", "p"), ("n", 2)], [("a", 2)]), EXIST),  # fails alone
                UpdateRowItem(Row([("k", "p"), ("n", 3)], {"put": [("a", 3)]}), Condition("IGNORE")),
                DeleteRowItem(Row([("k", "old"), ("n", 1)]), EXIST),
            ],
        )
    )
    request.add(
        TableInBatchWriteRowItem("u", [PutRowItem(Row([("wrong", 1)], [("a", 1)]), Condition("IGNORE"))])
    )
    response = ots_client.batch_write_row(request)
    assert not response.is_all_succeed()
    puts = response.get_put_by_table("t")
    assert [p.is_ok for p in puts] == [True, False]
    assert (puts[1].error_code, puts[1].error_message) == ("OTSConditionCheckFail", "Condition check failed.")
    bad = response.get_put_by_table("u")[0]
    assert (bad.is_ok, bad.error_code) == (False, "OTSInvalidPK")
    assert [len(part) for part in response.get_update() + response.get_delete()] == [1, 0, 1, 0]
    _, _, rows, _ = ots_client.get_range("t", "FORWARD", *FULL, max_version=1)
    assert [r.primary_key[1][1] for r in rows] == [1, 3]


def test_batch_write_whole_request_errors_write_nothing(ots_client: OTSClient) -> None:
    make_table(ots_client)
    request = BatchWriteRowRequest()
    request.add(
        TableInBatchWriteRowItem(
            "t", [PutRowItem(Row([("k", "x"), ("n", 1)], [("a", 1)]), Condition("IGNORE"))]
        )
    )
    request.add(
        TableInBatchWriteRowItem(
            "missing", [PutRowItem(Row([("k", "x"), ("n", 1)], []), Condition("IGNORE"))]
        )
    )
    assert error_of(ots_client.batch_write_row, request).code == "OTSObjectNotExist"
    assert ots_client.get_row("t", [("k", "x"), ("n", 1)], max_version=1)[1] is None
    too_many = BatchWriteRowRequest()
    too_many.add(
        TableInBatchWriteRowItem(
            "t", [PutRowItem(Row([("k", "x"), ("n", i)], []), Condition("IGNORE")) for i in range(201)]
        )
    )
    e = error_of(ots_client.batch_write_row, too_many)
    assert (e.code, e.message) == ("OTSParameterInvalid", "Rows count exceeds the upper limit: 200.")
    e = error_of(ots_client.batch_write_row, BatchWriteRowRequest())
    assert e.message == "No row is specified in BatchWriteRow."


def test_batch_get_row(ots_client: OTSClient) -> None:
    make_table(ots_client)
    ots_client.put_row("t", Row([("k", "x"), ("n", 1)], [("a", 1)]))
    request = BatchGetRowRequest()
    keys = [[("k", "x"), ("n", 1)], [("k", "x"), ("n", 2)], [("k", "x")]]
    request.add(TableInBatchGetRowItem("t", keys, max_version=1))
    result = ots_client.batch_get_row(request).get_result_by_table("t")
    assert [r.is_ok for r in result] == [True, True, False]
    assert attrs(result[0].row) == {"a": 1} and result[1].row is None
    assert result[2].error_code == "OTSInvalidPK"
    # A full batch is answered in request order, an invalid key and a repeated one included
    # (the server reads a batch's rows in a few queries, not one per key).
    for n in range(0, 60, 3):
        ots_client.put_row("t", Row([("k", "y"), ("n", n)], [("a", n)]))
    keys = [[("k", "y"), ("n", n)] for n in range(60)] + [[("k", "y")]] + [[("k", "y"), ("n", 3)]] * 2
    request = BatchGetRowRequest()
    request.add(TableInBatchGetRowItem("t", keys, max_version=1))
    result = ots_client.batch_get_row(request).get_result_by_table("t")
    assert [attrs(r.row) if r.row else None for r in result[:60]] == [
        {"a": n} if n % 3 == 0 else None for n in range(60)]
    assert result[60].error_code == "OTSInvalidPK"
    assert [attrs(r.row) for r in result[61:]] == [{"a": 3}, {"a": 3}]
    big = BatchGetRowRequest()
    big.add(TableInBatchGetRowItem("t", [[("k", "x"), ("n", i)] for i in range(101)], max_version=1))
    assert error_of(ots_client.batch_get_row, big).message == "Rows count exceeds the upper limit: 100."
