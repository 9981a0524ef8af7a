"""Local transactions through the official SDK: isolation, commit and abort on every write API,
locks, timeout, ids, the partition rule and the table option."""

from __future__ import annotations

import pytest
from tablestore import (
    INF_MAX,
    INF_MIN,
    PK_AUTO_INCR,
    BatchWriteRowRequest,
    CapacityUnit,
    Condition,
    Direction,
    OTSClient,
    OTSServiceError,
    PutRowItem,
    ReservedThroughput,
    Row,
    SecondaryIndexMeta,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
    UpdateRowItem,
)
from tablestore.protobuf import table_store_pb2 as pb
from tablestore.retry import NoRetryPolicy

from tests.local.rawhttp import call
from tsmigrate.local.testing import LocalTablestore

CU0 = ReservedThroughput(CapacityUnit(0, 0))
PK = [("PK0", 1), ("PK1", "transaction")]
RANGE = ([("PK0", 1), ("PK1", INF_MIN)], [("PK0", 1), ("PK1", INF_MAX)])


@pytest.fixture
def client(ots_instance: LocalTablestore) -> OTSClient:
    """A client that does not retry: the SDK retries OTSRowOperationConflict by default."""
    client = ots_instance.client(retry_policy=NoRetryPolicy())
    client.create_table(TableMeta("txn", [("PK0", "INTEGER"), ("PK1", "STRING")]), TableOptions(), CU0)
    client.put_row("txn", Row(PK, [("value", "origin")]))
    return client


def value(client: OTSClient, pk: list[tuple[str, object]] = PK, txn: str | None = None) -> object:
    _, row, _ = client.get_row("txn", pk, ["value"], max_version=1, transaction_id=txn)
    return None if row is None else row.attribute_columns[0][1]


def error_of(call_, *args, **kwargs) -> OTSServiceError:  # type: ignore[no-untyped-def]
    with pytest.raises(OTSServiceError) as info:
        call_(*args, **kwargs)
    return info.value


def status(e: OTSServiceError) -> tuple[int, str, str]:
    return e.http_status, e.code, e.message


CONFLICT = (409, "OTSRowOperationConflict", "Data is being modified by the other request.")
GONE = (404, "OTSSessionNotExist", "Session not exist or may be timeout.")
INVALID_ID = (400, "OTSParameterInvalid", "TransactionID is invalid.")


@pytest.mark.parametrize("finish", ["commit", "abort"])
@pytest.mark.parametrize("write", ["put", "update", "batch"])
def test_writes_show_to_others_only_after_commit(client: OTSClient, write: str, finish: str) -> None:
    txn = client.start_local_transaction("txn", [("PK0", 1)])
    if write == "put":
        client.put_row("txn", Row(PK, [("value", "new")]), Condition("IGNORE"), None, txn)
    elif write == "update":
        client.update_row("txn", Row(PK, {"PUT": [("value", "new")]}), Condition("IGNORE"), None, txn)
    else:
        request = BatchWriteRowRequest()
        request.add(TableInBatchWriteRowItem("txn", [UpdateRowItem(Row(PK, {"put": [("value", "new")]}),
                                                                   Condition("IGNORE"))]))
        request.set_transaction_id(txn)
        assert client.batch_write_row(request).is_all_succeed()
    assert value(client, txn=txn) == "new"
    assert value(client) == "origin"
    if finish == "commit":
        client.commit_transaction(txn)
        assert value(client) == "new"
    else:
        client.abort_transaction(txn)
        assert value(client) == "origin"


def test_delete_and_range_inside_a_transaction(client: OTSClient) -> None:
    client.put_row("txn", Row([("PK0", 1), ("PK1", "z")], [("value", "z")]))
    txn = client.start_local_transaction("txn", [("PK0", 1)])
    client.delete_row("txn", Row(PK), Condition("IGNORE"), transaction_id=txn)
    client.put_row("txn", Row([("PK0", 1), ("PK1", "a")], [("value", "a")]), Condition("IGNORE"), None, txn)

    def keys(txn_id: str | None) -> list[str]:
        _, _, rows, _ = client.get_range("txn", Direction.FORWARD, *RANGE, [], max_version=1,
                                         transaction_id=txn_id)
        return [r.primary_key[1][1] for r in rows]

    assert keys(txn) == ["a", "z"]
    assert keys(None) == ["transaction", "z"]
    _, next_pk, rows, _ = client.get_range("txn", Direction.FORWARD, *RANGE, [], 1, max_version=1,
                                           transaction_id=txn)
    assert [r.primary_key for r in rows] == [[("PK0", 1), ("PK1", "a")]]
    assert next_pk == [("PK0", 1), ("PK1", "z")]
    client.commit_transaction(txn)
    assert keys(None) == ["a", "z"]


def test_a_held_partition_refuses_other_writers_not_readers(client: OTSClient) -> None:
    txn = client.start_local_transaction("txn", [("PK0", 1)])
    assert status(error_of(client.put_row, "txn", Row(PK, [("value", "x")]))) == CONFLICT
    assert status(error_of(client.delete_row, "txn", Row([("PK0", 1), ("PK1", "other")]))) == CONFLICT
    request = BatchWriteRowRequest()
    request.add(TableInBatchWriteRowItem("txn", [PutRowItem(Row(PK, [("value", "x")]), Condition("IGNORE"))]))
    failed = client.batch_write_row(request).get_put()[1]
    assert [(f.error_code, f.error_message) for f in failed] == [CONFLICT[1:]]
    assert status(error_of(client.start_local_transaction, "txn", [("PK0", 1)])) == CONFLICT
    assert value(client) == "origin"  # reads go on
    client.put_row("txn", Row([("PK0", 2), ("PK1", "x")], [("value", "other partition")]))
    client.commit_transaction(txn)
    client.put_row("txn", Row(PK, [("value", "free again")]))
    assert value(client) == "free again"


def test_transaction_ids(client: OTSClient) -> None:
    for bad in ("", "made-up"):
        assert status(error_of(client.commit_transaction, bad)) == INVALID_ID
        assert status(error_of(client.abort_transaction, bad)) == INVALID_ID
        assert status(error_of(client.put_row, "txn", Row(PK, [("value", 1)]), Condition("IGNORE"), None,
                               bad)) == INVALID_ID
    assert value(client) == "origin"  # nothing applied under a made-up id
    txn = client.start_local_transaction("txn", [("PK0", 1)])
    client.commit_transaction(txn)
    assert status(error_of(client.commit_transaction, txn)) == GONE
    assert status(error_of(client.abort_transaction, txn)) == GONE
    assert status(error_of(value, client, txn=txn)) == GONE


def test_a_transaction_times_out_after_60_seconds(
    client: OTSClient, ots_instance: LocalTablestore, ots_server_options
) -> None:  # type: ignore[no-untyped-def]
    txn = client.start_local_transaction("txn", [("PK0", 1)])
    client.put_row("txn", Row(PK, [("value", "lost")]), Condition("IGNORE"), None, txn)
    ots_instance.server.clock_offset += 59
    assert value(client, txn=txn) == "lost"
    ots_instance.server.clock_offset += 2  # the fixture restores the clock
    assert status(error_of(client.commit_transaction, txn)) == GONE
    assert value(client) == "origin"
    client.put_row("txn", Row(PK, [("value", "unlocked")]))  # the lock went with it


def test_one_partition_key_per_transaction(client: OTSClient) -> None:
    e = error_of(client.start_local_transaction, "txn", PK)
    assert status(e) == (400, "OTSParameterInvalid", "StartLocalTransaction support only one primary key.")
    e = error_of(client.start_local_transaction, "", [("PK0", 1)])
    assert status(e) == (400, "OTSParameterInvalid", "Invalid table name: ''.")
    txn = client.start_local_transaction("txn", [("PK0", 1)])
    elsewhere = Row([("PK0", 2), ("PK1", "x")], [("v", 1)])
    outside = error_of(client.put_row, "txn", elsewhere, Condition("IGNORE"), None, txn)
    assert outside.code == "OTSParameterInvalid" and "partition key" in outside.message
    assert error_of(value, client, [("PK0", 2), ("PK1", "x")], txn).code == "OTSParameterInvalid"
    client.abort_transaction(txn)


def test_commit_maintains_secondary_indexes(ots_instance: LocalTablestore) -> None:
    client = ots_instance.client(retry_policy=NoRetryPolicy())
    meta = TableMeta("base", [("pk", "STRING"), ("n", "INTEGER")], [("a", "STRING")])
    client.create_table(meta, TableOptions(), CU0, [SecondaryIndexMeta("by_a", ["a"], [])])
    txn = client.start_local_transaction("base", [("pk", "p")])
    client.put_row("base", Row([("pk", "p"), ("n", 1)], [("a", "x")]), Condition("IGNORE"), None, txn)
    key = [("a", "x"), ("pk", "p"), ("n", 1)]
    assert client.get_row("by_a", key, max_version=1)[1] is None
    client.commit_transaction(txn)
    assert client.get_row("by_a", key, max_version=1)[1].primary_key == key


class _WithLocalTxn:
    """A CreateTableRequest with the field the Python SDK cannot set (enable_local_txn = 8)."""

    def __init__(self, request: pb.CreateTableRequest, enabled: bool) -> None:
        self.body = request.SerializeToString() + bytes([8 << 3, int(enabled)])

    def SerializeToString(self) -> bytes:
        return self.body


def _create(client: OTSClient, name: str, enabled: bool, auto_increment: bool = False) -> None:
    request = pb.CreateTableRequest()
    request.table_meta.table_name = name
    request.table_meta.primary_key.add(name="pk", type=pb.STRING)
    if auto_increment:
        request.table_meta.primary_key.add(name="id", type=pb.INTEGER, option=pb.AUTO_INCREMENT)
    request.reserved_throughput.capacity_unit.read = 0
    request.reserved_throughput.capacity_unit.write = 0
    request.table_options.time_to_live = -1
    request.table_options.max_versions = 1
    call(client, "CreateTable", _WithLocalTxn(request, enabled), pb.CreateTableResponse)


def test_the_table_option_enables_transactions(ots_instance: LocalTablestore) -> None:
    client = ots_instance.client(retry_policy=NoRetryPolicy())
    disabled = (400, "OTSParameterInvalid",
                "Try to call method using explicit transaction on explicit-transaction-disabled table.")
    _create(client, "on", True)
    _create(client, "off", False)
    assert client.start_local_transaction("on", [("pk", "a")])
    assert status(error_of(client.start_local_transaction, "off", [("pk", "a")])) == disabled
    e = error_of(_create, client, "auto", True, auto_increment=True)
    assert e.code == "OTSParameterInvalid" and "auto-increment" in e.message
    meta = TableMeta("auto", [("pk", "STRING"), ("id", "INTEGER", PK_AUTO_INCR)])
    client.create_table(meta, TableOptions(), CU0)
    assert status(error_of(client.start_local_transaction, "auto", [("pk", "a")])) == disabled


def test_the_server_default_for_tables_created_without_the_option(
    ots_instance: LocalTablestore, ots_server_options
) -> None:  # type: ignore[no-untyped-def]
    client = ots_instance.client(retry_policy=NoRetryPolicy())
    client.create_table(TableMeta("plain", [("pk", "STRING")]), TableOptions(), CU0)
    assert client.start_local_transaction("plain", [("pk", "a")])
    ots_server_options.local_transactions_default = False
    assert error_of(client.start_local_transaction, "plain", [("pk", "b")]).code == "OTSParameterInvalid"
