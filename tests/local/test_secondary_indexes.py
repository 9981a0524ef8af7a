"""Secondary indexes of the local server through the official SDK: index rows on every write path,
sparse rows, backfill, drop, DeleteTable, prerequisites and limits, read-only index tables, lag."""

from __future__ import annotations

from typing import Any

import pytest
from tablestore import (
    INF_MAX,
    INF_MIN,
    PK_AUTO_INCR,
    BatchGetRowRequest,
    BatchWriteRowRequest,
    CapacityUnit,
    Condition,
    DeleteRowItem,
    OTSClient,
    OTSServiceError,
    PutRowItem,
    ReservedThroughput,
    Row,
    RowExistenceExpectation,
    SecondaryIndexMeta,
    SecondaryIndexType,
    TableInBatchGetRowItem,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
    UpdateRowItem,
)
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local import tables
from tsmigrate.local.context import Context, ServerOptions
from tsmigrate.local.testing import LocalTablestore

CU0 = ReservedThroughput(CapacityUnit(0, 0))
EXIST = Condition(RowExistenceExpectation.EXPECT_EXIST)
BASE_PK = ["pk", "n"]
DEFINED = [("a", "STRING"), ("b", "INTEGER"), ("c", "DOUBLE"), ("d", "BOOLEAN")]
# name -> (index columns, included columns): a global index on `a`, a local one led by `pk`.
INDEXES = {"by_a": (["a"], ["c"]), "by_pk_b": (["pk", "b"], ["a"])}
LOCAL = SecondaryIndexType.LOCAL_INDEX
CANT_WRITE = (400, "OTSParameterInvalid", "Can't write index table directly.")


def error_of(call, *args, **kwargs) -> OTSServiceError:  # type: ignore[no-untyped-def]
    with pytest.raises(OTSServiceError) as info:
        call(*args, **kwargs)
    return info.value


def status(e: OTSServiceError) -> tuple[int, str, str]:
    return e.http_status, e.code, e.message


def create_base(
    client: OTSClient, name: str = "base", options: TableOptions | None = None, indexes: bool = True
) -> None:
    meta = TableMeta(name, [("pk", "STRING"), ("n", "INTEGER")], DEFINED)
    metas = [
        SecondaryIndexMeta("by_a", ["a"], ["c"]),
        SecondaryIndexMeta("by_pk_b", ["pk", "b"], ["a"], LOCAL),
    ]
    client.create_table(meta, options or TableOptions(), CU0, metas if indexes else [])


def scan(client: OTSClient, table: str, pk_names: list[str]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every row of a table or index, as (PK values, {attribute: value}), in key order."""
    start = [(n, INF_MIN) for n in pk_names]
    end = [(n, INF_MAX) for n in pk_names]
    out = []
    while start:
        _, start, rows, _ = client.get_range(table, "FORWARD", start, end, max_version=1)
        for row in rows:
            assert [n for n, _ in row.primary_key] == pk_names
            out.append((tuple(v for _, v in row.primary_key), {c[0]: c[1] for c in row.attribute_columns}))
    return out


def index_pk(index: str) -> list[str]:
    keys, _ = INDEXES[index]
    return keys + [n for n in BASE_PK if n not in keys]


def derived(
    client: OTSClient, index: str, table: str = "base"
) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """What the index must hold, computed from the base table (sparse: rows lacking a key left out)."""
    keys, included = INDEXES[index]
    out = []
    for pk_values, attrs in scan(client, table, BASE_PK):
        values = {**dict(zip(BASE_PK, pk_values, strict=True)), **attrs}
        if all(k in values for k in keys):
            pk = tuple(values[n] for n in index_pk(index))
            out.append((pk, {n: attrs[n] for n in included if n in attrs}))
    return sorted(out, key=lambda entry: entry[0])


def assert_in_step(client: OTSClient, table: str = "base") -> None:
    for index in INDEXES:
        assert scan(client, index, index_pk(index)) == derived(client, index, table), index


def batch(client: OTSClient, table: str, items: list[Any]) -> list[bool]:
    request = BatchWriteRowRequest()
    request.add(TableInBatchWriteRowItem(table, items))
    result = client.batch_write_row(request)
    by_kind = (result.table_of_put, result.table_of_update, result.table_of_delete)
    return [r.is_ok for kind in by_kind for r in kind.get(table, [])]  # puts, updates, deletes


def test_indexes_follow_every_write_path(ots_client: OTSClient) -> None:
    client = ots_client
    create_base(client)
    client.put_row("base", Row([("pk", "x"), ("n", 1)], [("a", "A1"), ("b", 10), ("c", 1.5), ("d", True)]))
    client.put_row("base", Row([("pk", "x"), ("n", 2)], [("b", 20), ("c", 2.5)]))  # no `a`: sparse
    client.put_row("base", Row([("pk", "y"), ("n", 1)], [("d", False)]))  # in neither index
    assert scan(client, "by_a", index_pk("by_a")) == [(("A1", "x", 1), {"c": 1.5})]
    assert scan(client, "by_pk_b", index_pk("by_pk_b")) == [
        (("x", 10, 1), {"a": "A1"}),
        (("x", 20, 2), {}),
    ]
    assert_in_step(client)

    # Updating an indexed column moves the index row: the old key is gone.
    client.update_row("base", Row([("pk", "x"), ("n", 1)], {"put": [("a", "A0")]}), None)
    assert [pk for pk, _ in scan(client, "by_a", index_pk("by_a"))] == [("A0", "x", 1)]
    client.update_row("base", Row([("pk", "x"), ("n", 1)], {"increment": [("b", 5)]}), None)
    assert [pk for pk, _ in scan(client, "by_pk_b", index_pk("by_pk_b"))] == [("x", 15, 1), ("x", 20, 2)]
    assert_in_step(client)
    # An update giving the sparse row its missing key column adds it to the index.
    client.update_row("base", Row([("pk", "x"), ("n", 2)], {"put": [("a", "A5")]}), None)
    assert_in_step(client)
    # Deleting one version of an included column, then all of an index column.
    _, row, _ = client.get_row("base", [("pk", "x"), ("n", 2)], ["c"], max_version=1)
    ts = row.attribute_columns[0][2]
    client.update_row("base", Row([("pk", "x"), ("n", 2)], {"delete": [("c", None, ts)]}), None)
    assert scan(client, "by_a", index_pk("by_a"))[1] == (("A5", "x", 2), {})
    client.update_row("base", Row([("pk", "x"), ("n", 1)], {"delete_all": ["a"]}), None)
    assert [pk for pk, _ in scan(client, "by_a", index_pk("by_a"))] == [("A5", "x", 2)]
    assert_in_step(client)
    # An update that leaves no column deletes the row, and its index rows.
    client.update_row("base", Row([("pk", "y"), ("n", 1)], {"delete_all": ["d"]}), None)
    client.delete_row("base", Row([("pk", "x"), ("n", 2)]), None)
    assert [pk for pk, _ in scan(client, "by_a", index_pk("by_a"))] == []
    assert_in_step(client)

    results = batch(
        client,
        "base",
        [
            PutRowItem(Row([("pk", "z"), ("n", 1)], [("a", "Z"), ("b", 1), ("c", 9.0)]), None),
            PutRowItem(Row([("pk", "z"), ("n", 2)], [("a", "Z"), ("b", 2)]), None),
            UpdateRowItem(Row([("pk", "x"), ("n", 1)], {"put": [("a", "A7"), ("b", 70)]}), None),
            UpdateRowItem(Row([("pk", "q"), ("n", 1)], {"put": [("a", "never")]}), EXIST),  # fails
            DeleteRowItem(Row([("pk", "z"), ("n", 2)]), None),
        ],
    )
    assert results == [True, True, True, False, True]
    assert [pk for pk, _ in scan(client, "by_a", index_pk("by_a"))] == [("A7", "x", 1), ("Z", "z", 1)]
    assert_in_step(client)


def test_reading_an_index(ots_client: OTSClient) -> None:
    create_base(ots_client)
    for i in range(5):
        ots_client.put_row(
            "base", Row([("pk", f"p{i % 2}"), ("n", i)], [("a", f"v{4 - i}"), ("c", float(i))])
        )
    names = index_pk("by_a")
    # GetRange with INF_MIN / INF_MAX, backward, and a bounded range inside the index key order.
    assert [pk for pk, _ in scan(ots_client, "by_a", names)] == [
        (f"v{4 - i}", f"p{i % 2}", i) for i in reversed(range(5))
    ]
    _, _, rows, _ = ots_client.get_range(
        "by_a", "BACKWARD", [(n, INF_MAX) for n in names], [(n, INF_MIN) for n in names], max_version=1
    )
    assert [r.primary_key[0][1] for r in rows] == ["v4", "v3", "v2", "v1", "v0"]
    _, _, rows, _ = ots_client.get_range(
        "by_a",
        "FORWARD",
        [("a", "v1"), ("pk", INF_MIN), ("n", INF_MIN)],
        [("a", "v3"), ("pk", INF_MIN), ("n", INF_MIN)],
        max_version=1,
    )
    assert [r.primary_key[0][1] for r in rows] == ["v1", "v2"]
    _, row, _ = ots_client.get_row("by_a", [("a", "v4"), ("pk", "p0"), ("n", 0)], max_version=1)
    assert row.attribute_columns[0][:2] == ("c", 0.0)
    e = error_of(ots_client.get_row, "by_a", [("a", "v4")], max_version=1)
    assert (e.code, e.message) == ("OTSInvalidPK", "Validate PK size fail. Input: 1, Meta: 3.")
    request = BatchGetRowRequest()
    request.add(
        TableInBatchGetRowItem(
            "by_a",
            [[("a", "v3"), ("pk", "p1"), ("n", 1)], [("a", "no"), ("pk", "p"), ("n", 0)]],
            max_version=1,
        )
    )
    got = ots_client.batch_get_row(request).get_result_by_table("by_a")
    assert [r.row.primary_key if r.row else None for r in got] == [
        [("a", "v3"), ("pk", "p1"), ("n", 1)],
        None,
    ]
    assert ots_client.list_table() == ("base",)  # index tables are not data tables


def test_index_tables_refuse_writes(ots_client: OTSClient) -> None:
    create_base(ots_client)
    ots_client.put_row("base", Row([("pk", "x"), ("n", 1)], [("a", "A")]))
    pk = [("a", "A"), ("pk", "x"), ("n", 1)]
    assert status(error_of(ots_client.put_row, "by_a", Row(pk, [("c", 1.0)]))) == CANT_WRITE
    assert status(error_of(ots_client.update_row, "by_a", Row(pk, {"put": [("c", 1.0)]}), None)) == CANT_WRITE
    assert status(error_of(ots_client.delete_row, "by_a", Row(pk), None)) == CANT_WRITE
    assert status(error_of(batch, ots_client, "by_pk_b", [DeleteRowItem(Row(pk), None)])) == CANT_WRITE
    assert scan(ots_client, "by_a", index_pk("by_a")) == [(("A", "x", 1), {})]
    assert error_of(ots_client.put_row, "nothing", Row([("a", "A")], [])).code == "OTSObjectNotExist"


def test_create_index_with_and_without_base_data(ots_instance: LocalTablestore) -> None:
    client = ots_instance.client()
    create_base(client, indexes=False)
    client.put_row("base", Row([("pk", "x"), ("n", 1)], [("a", "A1"), ("b", 1), ("c", 1.0)]))
    client.put_row("base", Row([("pk", "x"), ("n", 2)], [("b", 2)]))  # sparse for by_a
    client.put_row("base", Row([("pk", "y"), ("n", 3)], [("a", "A3"), ("b", 3)]))
    client.create_secondary_index("base", SecondaryIndexMeta("by_a", ["a"], ["c"]), True)
    client.create_secondary_index("base", SecondaryIndexMeta("by_pk_b", ["pk", "b"], ["a"], LOCAL), False)
    assert scan(client, "by_a", index_pk("by_a")) == [(("A1", "x", 1), {"c": 1.0}), (("A3", "y", 3), {})]
    assert scan(client, "by_pk_b", index_pk("by_pk_b")) == []  # existing rows left out...
    client.put_row("base", Row([("pk", "y"), ("n", 4)], [("a", "A4"), ("b", 4)]))
    assert scan(client, "by_pk_b", index_pk("by_pk_b")) == [(("y", 4, 4), {"a": "A4"})]  # ...new ones in
    client.update_row("base", Row([("pk", "x"), ("n", 1)], {"put": [("b", 10)]}), None)
    assert [pk for pk, _ in scan(client, "by_pk_b", index_pk("by_pk_b"))] == [("x", 10, 1), ("y", 4, 4)]

    described = client.describe_table("base").secondary_indexes
    assert [(i.index_name, i.primary_key_names, i.defined_column_names, i.index_type) for i in described] == [
        ("by_a", ["a"], ["c"], SecondaryIndexType.GLOBAL_INDEX),
        ("by_pk_b", ["pk", "b"], ["a"], LOCAL),
    ]
    # The SDK does not expose the update mode: read it from the handler's response.
    server = ots_instance.server
    ctx = Context(server, ots_instance.instance, "DescribeTable", server.now())
    response = tables.describe_table(ctx, pb.DescribeTableRequest(table_name="base"))
    assert [m.index_update_mode for m in response.index_metas] == [pb.IUM_ASYNC_INDEX, pb.IUM_SYNC_INDEX]


def test_drop_index(ots_client: OTSClient) -> None:
    create_base(ots_client)
    ots_client.put_row("base", Row([("pk", "x"), ("n", 1)], [("a", "A1"), ("b", 1)]))
    ots_client.delete_secondary_index("base", "by_a")
    assert [i.index_name for i in ots_client.describe_table("base").secondary_indexes] == ["by_pk_b"]
    e = error_of(ots_client.get_range, "by_a", "FORWARD", [("a", INF_MIN)], [("a", INF_MAX)], max_version=1)
    assert status(e) == (404, "OTSObjectNotExist", "Requested table does not exist.")
    e = error_of(ots_client.delete_secondary_index, "base", "by_a")
    assert status(e) == (404, "OTSObjectNotExist", "Requested index does not exist.")
    # Writes go on; the name is free again, and a new index of that name starts from the base rows.
    ots_client.put_row("base", Row([("pk", "x"), ("n", 2)], [("a", "A2")]))
    ots_client.create_secondary_index("base", SecondaryIndexMeta("by_a", ["a"], ["c"]), False)
    assert scan(ots_client, "by_a", index_pk("by_a")) == []


def test_delete_table_removes_index_tables_and_frees_quota(ots_client: OTSClient) -> None:
    create_base(ots_client)
    ots_client.put_row("base", Row([("pk", "x"), ("n", 1)], [("a", "A1"), ("b", 1)]))
    for i in range(3):
        ots_client.create_secondary_index("base", SecondaryIndexMeta(f"extra{i}", ["b"], []), True)
    for i in range(58):  # 1 + 5 index tables + 58 = 64, the quota
        ots_client.create_table(TableMeta(f"t{i}", [("id", "STRING")]), TableOptions(), CU0)
    e = error_of(ots_client.create_table, TableMeta("t58", [("id", "STRING")]), TableOptions(), CU0)
    assert status(e) == (403, "OTSQuotaExhausted", "Number of tables exceeded the quota.")
    e = error_of(ots_client.create_secondary_index, "base", SecondaryIndexMeta("extra3", ["a"], []), True)
    assert e.message == "The number of indexes of table [base] exceeds the limit: 5."
    ots_client.delete_secondary_index("base", "extra0")  # frees one table of the quota
    ots_client.create_table(TableMeta("t58", [("id", "STRING")]), TableOptions(), CU0)
    e = error_of(ots_client.create_secondary_index, "base", SecondaryIndexMeta("extra0", ["a"], []), True)
    assert status(e) == (403, "OTSQuotaExhausted", "Number of tables exceeded the quota.")

    ots_client.delete_table("base")  # frees the table and its 4 index tables
    for name in ("by_a", "by_pk_b", "extra1"):
        e = error_of(ots_client.get_row, name, [("a", "A1"), ("pk", "x"), ("n", 1)], max_version=1)
        assert e.code == "OTSObjectNotExist"
    create_base(ots_client)  # the same names again: empty index tables
    assert scan(ots_client, "by_a", index_pk("by_a")) == []
    for i in range(59, 61):  # 64 - 2 tables freed
        ots_client.create_table(TableMeta(f"t{i}", [("id", "STRING")]), TableOptions(), CU0)
    e = error_of(ots_client.create_table, TableMeta("t61", [("id", "STRING")]), TableOptions(), CU0)
    assert e.code == "OTSQuotaExhausted"


def test_prerequisites_and_rules(ots_client: OTSClient) -> None:
    client = ots_client
    invalid = "OTSParameterInvalid"
    max_versions = (400, invalid, "The max versions of a table with index must be 1.")
    ttl_update = (400, invalid, "The table with index and TTL must disable update (allow_update=false).")
    assert status(error_of(create_base, client, "mv", TableOptions(max_version=2))) == max_versions
    assert status(error_of(create_base, client, "ttl", TableOptions(time_to_live=86400))) == ttl_update
    create_base(client, "ttl", TableOptions(time_to_live=86400, allow_update=False))  # allowed
    assert client.list_table() == ("ttl",)

    create_base(client, "plain", TableOptions(max_version=3), indexes=False)
    e = error_of(client.create_secondary_index, "plain", SecondaryIndexMeta("i", ["a"], []), True)
    assert status(e) == max_versions
    client.update_table("plain", TableOptions(max_version=1))
    client.create_secondary_index("plain", SecondaryIndexMeta("i", ["a"], []), True)
    # An UpdateTable that would break an index's prerequisites is refused and changes nothing.
    assert status(error_of(client.update_table, "plain", TableOptions(max_version=2))) == max_versions
    assert status(error_of(client.update_table, "plain", TableOptions(time_to_live=86400))) == ttl_update
    options = client.describe_table("plain").table_options
    assert (options.max_version, options.time_to_live) == (1, -1)
    client.update_table("plain", TableOptions(time_to_live=86400, allow_update=False))

    bad = [
        (
            SecondaryIndexMeta("j", ["b", "a"], [], LOCAL),
            "The first primary key of local index [j] must be the first primary key of the table.",
        ),
        (SecondaryIndexMeta("j", ["c"], []), "Column [c] of index [j] has a type that cannot be indexed."),
        (
            SecondaryIndexMeta("j", ["zz"], []),
            "Column [zz] of index [j] is not a primary key or defined column.",
        ),
        (SecondaryIndexMeta("j", ["a"], ["n"]), "Column [n] of index [j] is not a defined column."),
        (SecondaryIndexMeta("j", ["a"], ["a"]), "Column [a] of index [j] is both key and attribute."),
        (SecondaryIndexMeta("j", ["a", "a"], []), "Duplicated primary key name in index: j."),
        (SecondaryIndexMeta("j", ["a"], ["c", "c"]), "Duplicated defined column name in index: j."),
        (
            SecondaryIndexMeta("j", ["a", "b", "pk", "n", "d"], []),
            "The number of primary key columns of index must be in range: [1, 4]: j.",
        ),
        (SecondaryIndexMeta("bad-name", ["a"], []), "Invalid table name: 'bad-name'."),
    ]
    for meta, message in bad:
        assert status(error_of(client.create_secondary_index, "plain", meta, True)) == (400, invalid, message)
    for name in ("plain", "i", "by_a"):  # tables and indexes share one name space
        e = error_of(client.create_secondary_index, "plain", SecondaryIndexMeta(name, ["a"], []), True)
        assert status(e) == (409, "OTSObjectAlreadyExist", f"Index already exists: {name}.")
    e = error_of(client.create_table, TableMeta("by_a", [("id", "STRING")]), TableOptions(), CU0)
    assert status(e) == (409, "OTSObjectAlreadyExist", "Requested table already exists.")
    e = error_of(client.create_secondary_index, "missing", SecondaryIndexMeta("k", ["a"], []), True)
    assert status(e) == (404, "OTSObjectNotExist", "Requested table does not exist.")

    auto = TableMeta("auto", [("pk", "STRING"), ("seq", "INTEGER", PK_AUTO_INCR)], [("a", "STRING")])
    e = error_of(client.create_table, auto, TableOptions(), CU0, [SecondaryIndexMeta("k", ["seq", "a"], [])])
    assert e.message == "The first primary key of index [k] can't be auto increment."
    client.create_table(auto, TableOptions(), CU0, [SecondaryIndexMeta("k", ["a", "seq"], [])])
    assert [i.index_name for i in client.describe_table("plain").secondary_indexes] == ["i"]


def test_global_index_lag(ots_instance: LocalTablestore, ots_server_options: ServerOptions) -> None:
    client = ots_instance.client()
    server = ots_instance.server
    create_base(client)
    ots_server_options.global_index_lag_ms = 5000
    client.put_row("base", Row([("pk", "x"), ("n", 1)], [("a", "A1"), ("b", 1)]))
    assert scan(client, "by_a", index_pk("by_a")) == []  # global: not yet
    assert [pk for pk, _ in scan(client, "by_pk_b", index_pk("by_pk_b"))] == [("x", 1, 1)]  # local: at once
    server.clock_offset += 3
    client.update_row("base", Row([("pk", "x"), ("n", 1)], {"put": [("a", "A2")]}), None)
    assert scan(client, "by_a", index_pk("by_a")) == []
    server.clock_offset += 2.5  # the put is due, the update is not
    assert [pk for pk, _ in scan(client, "by_a", index_pk("by_a"))] == [("A1", "x", 1)]
    server.clock_offset += 3
    assert [pk for pk, _ in scan(client, "by_a", index_pk("by_a"))] == [("A2", "x", 1)]

    # Turning the lag off: what is queued is applied, in order, before the next change.
    client.delete_row("base", Row([("pk", "x"), ("n", 1)]), None)
    client.put_row("base", Row([("pk", "y"), ("n", 1)], [("a", "Y")]))
    ots_server_options.global_index_lag_ms = 0
    client.put_row("base", Row([("pk", "y"), ("n", 2)], [("a", "Y")]))
    assert [pk for pk, _ in scan(client, "by_a", index_pk("by_a"))] == [("Y", "y", 1), ("Y", "y", 2)]
    assert_in_step(client)


def test_values_an_index_key_cannot_hold_leave_the_row_out(ots_client: OTSClient) -> None:
    create_base(ots_client)
    ots_client.put_row("base", Row([("pk", "x"), ("n", 1)], [("a", 5), ("b", 1)]))  # `a` is STRING
    ots_client.put_row("base", Row([("pk", "x"), ("n", 2)], [("a", "v" * 1025), ("b", 2)]))  # > 1 KB
    ots_client.put_row("base", Row([("pk", "x"), ("n", 3)], [("a", "ok"), ("b", "2")]))  # `b` is INTEGER
    assert [pk for pk, _ in scan(ots_client, "by_a", index_pk("by_a"))] == [("ok", "x", 3)]
    assert [pk for pk, _ in scan(ots_client, "by_pk_b", index_pk("by_pk_b"))] == [("x", 1, 1), ("x", 2, 2)]


def test_index_reads_of_attribute_columns_carry_the_index_key(ots_client: OTSClient) -> None:
    create_base(ots_client)
    ots_client.put_row("base", Row([("pk", "p"), ("n", 1)], [("a", "x"), ("c", 1.5)]))
    key = [("a", "x"), ("pk", "p"), ("n", 1)]
    _, row, _ = ots_client.get_row("by_a", key, ["c"], max_version=1)
    assert row.primary_key == key and row.attribute_columns[0][:2] == ("c", 1.5)
    start, end = [(n, INF_MIN) for n, _ in key], [(n, INF_MAX) for n, _ in key]
    _, _, rows, _ = ots_client.get_range("by_a", "FORWARD", start, end, ["c"], max_version=1)
    assert [r.primary_key for r in rows] == [key]
