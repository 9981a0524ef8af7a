"""Table APIs of the local server through the official SDK: results, errors, codes and messages."""

from __future__ import annotations

import time
from typing import Any

import pytest
from tablestore import (
    INF_MAX,
    PK_AUTO_INCR,
    CapacityUnit,
    Direction,
    OTSClient,
    OTSServiceError,
    ReservedThroughput,
    Row,
    SecondaryIndexMeta,
    SecondaryIndexType,
    TableMeta,
    TableOptions,
)

from tsmigrate.local.testing import LocalTablestore
from tsmigrate.wire.plainbuffer import decode_value

CU0 = ReservedThroughput(CapacityUnit(0, 0))


def create(client: OTSClient, name: str, pk=None, options=None, **kwargs) -> None:  # type: ignore[no-untyped-def]
    meta = TableMeta(name, pk or [("id", "STRING")], kwargs.pop("defined_columns", []))
    client.create_table(meta, options or TableOptions(), CU0, **kwargs)


def error_of(call, *args, **kwargs) -> OTSServiceError:  # type: ignore[no-untyped-def]
    with pytest.raises(OTSServiceError) as info:
        call(*args, **kwargs)
    return info.value


def test_create_list_describe_delete(ots_client: OTSClient) -> None:
    meta = TableMeta(
        "orders",
        [("shop", "STRING"), ("oid", "INTEGER", PK_AUTO_INCR), ("tag", "BINARY")],
        [("total", "DOUBLE"), ("paid", "BOOLEAN"), ("note", "STRING")],
    )
    options = TableOptions(time_to_live=86400 * 2, max_version=3, max_time_deviation=3600)
    ots_client.create_table(meta, options, ReservedThroughput(CapacityUnit(5, 7)))
    create(ots_client, "b_table")
    assert ots_client.list_table() == ("b_table", "orders")

    desc = ots_client.describe_table("orders")
    assert desc.table_meta.table_name == "orders"
    assert desc.table_meta.schema_of_primary_key == [
        ("shop", "STRING"),
        ("oid", "INTEGER", PK_AUTO_INCR),
        ("tag", "BINARY"),
    ]
    assert desc.table_meta.defined_columns == [
        ("total", "DOUBLE"),
        ("paid", "BOOLEAN"),
        ("note", "STRING"),
    ]
    opts = desc.table_options
    assert (opts.time_to_live, opts.max_version, opts.max_time_deviation, opts.allow_update) == (
        172800,
        3,
        3600,
        True,
    )
    cu = desc.reserved_throughput_details.capacity_unit
    assert (cu.read, cu.write) == (5, 7)
    assert desc.reserved_throughput_details.last_increase_time > 0
    assert desc.secondary_indexes == []

    ots_client.delete_table("orders")
    assert ots_client.list_table() == ("b_table",)
    assert error_of(ots_client.describe_table, "orders").code == "OTSObjectNotExist"


def test_object_errors(ots_client: OTSClient) -> None:
    create(ots_client, "t")
    e = error_of(create, ots_client, "t")
    assert (e.http_status, e.code, e.message) == (
        409,
        "OTSObjectAlreadyExist",
        "Requested table already exists.",
    )
    for call in (ots_client.describe_table, ots_client.delete_table):
        e = error_of(call, "missing")
        assert (e.http_status, e.code, e.message) == (
            404,
            "OTSObjectNotExist",
            "Requested table does not exist.",
        )


@pytest.mark.parametrize(
    ("name", "pk", "message"),
    [
        ("9bad", None, "Invalid table name: '9bad'."),
        ("", None, "Invalid table name: ''."),
        ("t", [("a-b", "STRING")], "Invalid column name: 'a-b'."),
        ("t", [("a", "BOOLEAN")], "BOOLEAN is an invalid type for the primary key."),
        ("t", [("a", "STRING")] * 2, "Duplicated primary key name: 'a'."),
        (
            "t",
            [(f"p{i}", "STRING") for i in range(5)],
            "The number of primary key columns must be in range: [1, 4].",
        ),
        ("t", [("a", "INTEGER", PK_AUTO_INCR)], "First primary key can't be auto increment, table: t."),
        (
            "t",
            [("a", "STRING"), ("b", "STRING", PK_AUTO_INCR)],
            "AUTO_INCREMENT primary key must be integer.",
        ),
        (
            "t",
            [("a", "STRING"), ("b", "INTEGER", PK_AUTO_INCR), ("c", "INTEGER", PK_AUTO_INCR)],
            "AUTO_INCREMENT primary key count must <= 1.",
        ),
    ],
)
def test_create_table_validation(ots_client: OTSClient, name: str, pk: list, message: str) -> None:
    e = error_of(create, ots_client, name, pk)
    assert (e.http_status, e.code, e.message) == (400, "OTSParameterInvalid", message)
    assert ots_client.list_table() == ()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (TableOptions(time_to_live=0), "TimeToLive cannot be 0 or less than -1."),
        (TableOptions(time_to_live=-2), "TimeToLive cannot be 0 or less than -1."),
        (TableOptions(max_version=0), "The maximum versions cannot be less than or equal to 0."),
        (
            TableOptions(max_time_deviation=-1),
            "The maximum deviation must be in range [0, INT64_MAX/1000000].",
        ),
    ],
)
def test_table_options_validation(ots_client: OTSClient, options: TableOptions, message: str) -> None:
    e = error_of(create, ots_client, "t", options=options)
    assert (e.code, e.message) == ("OTSParameterInvalid", message)


def test_defined_columns_and_cu_validation(ots_client: OTSClient) -> None:
    e = error_of(create, ots_client, "t", defined_columns=[(f"c{i}", "STRING") for i in range(33)])
    assert e.message == "The number of defined columns must be in range: [0, 32]."
    meta = TableMeta("t", [("id", "STRING")])
    e = error_of(ots_client.create_table, meta, TableOptions(), ReservedThroughput(CapacityUnit(-1, 0)))
    assert e.message == "Invalid Capacity Unit:-1. Capacity Unit must be nonnegative."


def test_update_table_options_and_throughput(ots_instance: LocalTablestore, ots_server_options) -> None:  # type: ignore[no-untyped-def]
    client = ots_instance.client()
    create(client, "t")
    resp = client.update_table("t", TableOptions(time_to_live=86400, max_version=4, allow_update=False))
    assert (resp.table_options.time_to_live, resp.table_options.max_version) == (86400, 4)
    assert resp.table_options.allow_update is False
    desc = client.describe_table("t")
    assert desc.table_options.max_version == 4
    assert desc.table_options.max_time_deviation == 86400  # untouched options keep their value

    client.update_table("t", reserved_throughput=ReservedThroughput(CapacityUnit(10, 0)))
    details = client.describe_table("t").reserved_throughput_details
    assert (details.capacity_unit.read, details.capacity_unit.write) == (10, 0)
    # The service allows one adjustment every 2 minutes.
    e = error_of(client.update_table, "t", reserved_throughput=ReservedThroughput(CapacityUnit(1, 1)))
    assert (e.http_status, e.code, e.message) == (
        403,
        "OTSTooFrequentReservedThroughputAdjustment",
        "Capacity unit adjustment is too frequent.",
    )
    ots_server_options.cu_adjust_interval_s = 0
    client.update_table("t", reserved_throughput=ReservedThroughput(CapacityUnit(1, 1)))
    details = client.describe_table("t").reserved_throughput_details
    assert details.last_decrease_time is not None

    e = error_of(client.update_table, "t", TableOptions(time_to_live=5))
    assert e.code == "OTSParameterInvalid"
    assert error_of(client.update_table, "nope", TableOptions(max_version=2)).code == "OTSObjectNotExist"


def test_secondary_index_metas(ots_client: OTSClient) -> None:
    meta = TableMeta("base", [("a", "STRING"), ("b", "INTEGER")], [("x", "STRING"), ("y", "DOUBLE")])
    indexes = [
        SecondaryIndexMeta("by_x", ["x"], ["y"]),
        SecondaryIndexMeta("local_x", ["a", "x"], [], SecondaryIndexType.LOCAL_INDEX),
    ]
    ots_client.create_table(meta, TableOptions(), CU0, indexes)
    got = ots_client.describe_table("base").secondary_indexes
    assert [(i.index_name, i.primary_key_names, i.defined_column_names, i.index_type) for i in got] == [
        ("by_x", ["x"], ["y"], SecondaryIndexType.GLOBAL_INDEX),
        ("local_x", ["a", "x"], [], SecondaryIndexType.LOCAL_INDEX),
    ]
    assert ots_client.list_table() == ("base",)  # index tables are not listed

    bad = [
        (SecondaryIndexMeta("i", ["y"], []), "type that cannot be indexed"),
        (SecondaryIndexMeta("i", ["zz"], []), "is not a primary key or defined column"),
        (SecondaryIndexMeta("i", ["x"], [], SecondaryIndexType.LOCAL_INDEX), "must be the first primary key"),
        (SecondaryIndexMeta("base", ["x"], []), "Index already exists: base."),
    ]
    for n, (index, text) in enumerate(bad):
        meta = TableMeta(f"other{n}", [("a", "STRING")], [("x", "STRING"), ("y", "DOUBLE")])
        e = error_of(ots_client.create_table, meta, TableOptions(), CU0, [index])
        assert text in e.message
    meta = TableMeta("multi", [("a", "STRING")], [("x", "STRING")])
    e = error_of(
        ots_client.create_table, meta, TableOptions(max_version=2), CU0, [SecondaryIndexMeta("i", ["x"], [])]
    )
    assert e.message == "The max versions of a table with index must be 1."


def test_table_quota_counts_index_tables(ots_client: OTSClient) -> None:
    meta = TableMeta("indexed", [("a", "STRING")], [("x", "STRING")])
    ots_client.create_table(
        meta, TableOptions(), CU0, [SecondaryIndexMeta(f"i{i}", ["x"], []) for i in range(4)]
    )
    for i in range(59):
        create(ots_client, f"t{i}")
    e = error_of(create, ots_client, "one_too_many")
    assert (e.http_status, e.code, e.message) == (
        403,
        "OTSQuotaExhausted",
        "Number of tables exceeded the quota.",
    )
    assert len(ots_client.list_table()) == 60


class ServerClockTime:
    """The SDK client's `time` module, whose retry waits pass on the server's clock (at once)."""

    def __init__(self, ots: LocalTablestore) -> None:
        self.ots = ots
        self.slept = 0.0

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.ots.server.clock_offset += seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def test_table_operation_rate_limit(
    ots_instance: LocalTablestore, ots_server_options: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tablestore.client
    from tablestore import NoRetryPolicy

    ots_server_options.table_ops_per_s = 3
    client = ots_instance.client(retry_policy=NoRetryPolicy())
    for _ in range(3):
        client.list_table()
    e = error_of(client.list_table)
    assert (e.http_status, e.code, e.message) == (403, "OTSQuotaExhausted", "Too frequent table operations.")
    # The SDK's default policy retries this error, so a default client gets through: once the
    # server's rate window has moved on (by the SDK's own waits, on the server's clock).
    waits = ServerClockTime(ots_instance)
    monkeypatch.setattr(tablestore.client, "time", waits)
    assert ots_instance.client().list_table() == ()
    assert waits.slept > 0  # it was refused, waited and retried


def test_pre_split_partitions(ots_instance: LocalTablestore) -> None:
    client = ots_instance.client()
    meta = TableMeta("split", [("id", "INTEGER")])
    client._create_table_ex(meta, TableOptions(), CU0, split_points=[100, 200])
    # The SDK drops shard_splits from DescribeTable, so look at what the server kept.
    info = ots_instance.server.storage.table(ots_instance.instance, "split")
    assert info is not None
    assert [decode_value(s) for s in info.shard_splits] == [100, 200]


def test_boolean_primary_key_after_the_first(ots_client: OTSClient) -> None:
    # As aliyun-tablestore-java-sdk's BoolPkFunctiontest: BOOLEAN is refused as the first key
    # column only; rows store, read back and range-scan with false before true.
    create(ots_client, "flags", [("k", "STRING"), ("on", "BOOLEAN")])
    assert ots_client.describe_table("flags").table_meta.schema_of_primary_key == [
        ("k", "STRING"), ("on", "BOOLEAN")]
    for k, on in (("a", True), ("a", False), ("b", True)):
        ots_client.put_row("flags", Row([("k", k), ("on", on)], [("n", f"{k}{on}")]))
    _, row, _ = ots_client.get_row("flags", [("k", "a"), ("on", False)], max_version=1)
    assert (row.primary_key, row.attribute_columns[0][1]) == ([("k", "a"), ("on", False)], "aFalse")
    _, _, rows, _ = ots_client.get_range("flags", Direction.FORWARD, [("k", "a"), ("on", False)],
                                         [("k", "a"), ("on", INF_MAX)], max_version=1)
    assert [r.primary_key[1][1] for r in rows] == [False, True]
    e = error_of(ots_client.put_row, "flags", Row([("k", "c"), ("on", 1)], [("n", "x")]))
    assert e.message == "Validate PK type fail. Input: VT_INTEGER, Meta: VT_BOOLEAN."
