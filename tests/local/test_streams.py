"""Streams over raw protobuf (the Python SDK has no stream API): specification, change records for
every write path, iterator paging, expiration, bad iterators, durability."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rawhttp import call
from tablestore import (
    BatchWriteRowRequest,
    CapacityUnit,
    Condition,
    DeleteRowItem,
    OTSClient,
    OTSServiceError,
    PutRowItem,
    ReservedThroughput,
    Row,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
    UpdateRowItem,
)
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local.testing import LocalTablestore, local_tablestore
from tsmigrate.wire.plainbuffer import OP_DELETE_ALL, OP_DELETE_ONE, decode_row

CU0 = ReservedThroughput(CapacityUnit(0, 0))
TRIMMED = ("OTSTrimmedDataAccess", "Requested stream data is already trimmed or does not exist.")


def create(client: OTSClient, name: str = "t") -> None:
    client.create_table(TableMeta(name, [("id", "INTEGER")]), TableOptions(), CU0)


def set_stream(
    client: OTSClient, table: str, enable: bool, hours: int | None = None
) -> pb.UpdateTableResponse:
    spec = pb.StreamSpecification(enable_stream=enable)
    if hours is not None:
        spec.expiration_time = hours
    request = pb.UpdateTableRequest(table_name=table, stream_spec=spec)
    return call(client, "UpdateTable", request, pb.UpdateTableResponse)


def describe(client: OTSClient, table: str) -> pb.DescribeTableResponse:
    return call(client, "DescribeTable", pb.DescribeTableRequest(table_name=table), pb.DescribeTableResponse)


def iterator(client: OTSClient, table: str) -> str:
    stream_id = describe(client, table).stream_details.stream_id
    request = pb.DescribeStreamRequest(stream_id=stream_id)
    stream = call(client, "DescribeStream", request, pb.DescribeStreamResponse)
    shard = pb.GetShardIteratorRequest(stream_id=stream_id, shard_id=stream.shards[0].shard_id)
    return call(client, "GetShardIterator", shard, pb.GetShardIteratorResponse).shard_iterator


def read(client: OTSClient, it: str, limit: int | None = None) -> tuple[list[tuple[int, Any]], str]:
    request = pb.GetStreamRecordRequest(shard_iterator=it)
    if limit is not None:
        request.limit = limit
    resp = call(client, "GetStreamRecord", request, pb.GetStreamRecordResponse)
    return [(r.action_type, java_view(r.record)) for r in resp.stream_records], resp.next_shard_iterator


def java_view(record: bytes) -> tuple[list, list, bool]:
    """(pk, [(name, kind, value, ts)], delete marker), checking each cell the way the Java SDK's
    `PlainBufferConversion.toRecordColumn` does: a put has value and timestamp; delete-one has a
    timestamp and no value; delete-all has neither."""
    row = decode_row(record)
    cells = []
    for c in row.cells:
        if c.op is None:
            assert c.value is not None and c.timestamp is not None
            cells.append((c.name, "put", c.value, c.timestamp))
        elif c.op == OP_DELETE_ONE:
            assert c.value is None and c.timestamp is not None
            cells.append((c.name, "delete_one", None, c.timestamp))
        else:
            assert c.op == OP_DELETE_ALL and c.value is None and c.timestamp is None
            cells.append((c.name, "delete_all", None, None))
    return row.primary_key, cells, row.delete_marker


def error_of(call_, *args: Any) -> tuple[int, str, str]:
    with pytest.raises(OTSServiceError) as info:
        call_(*args)
    e = info.value
    return e.get_http_status(), e.get_error_code(), e.get_error_message()


def test_stream_specification_rules_and_details(ots_client: OTSClient) -> None:
    client = ots_client
    create(client)
    assert not describe(client, "t").stream_details.enable_stream
    for spec, message in [
        ((True, None), "Expiration time is required when enabling stream."),
        ((True, 0), "Expiration time of stream must be in range [1, 168]."),
        ((True, 169), "Expiration time of stream must be in range [1, 168]."),
        ((False, 24), "Expiration time cannot be set when disabling stream."),
    ]:
        assert error_of(set_stream, client, "t", *spec) == (400, "OTSParameterInvalid", message)
    details = set_stream(client, "t", True, 24).stream_details
    assert details.enable_stream and details.expiration_time == 24 and details.stream_id
    assert describe(client, "t").stream_details == details
    # A new expiration keeps the stream; disabling then enabling makes a new one.
    assert set_stream(client, "t", True, 168).stream_details.stream_id == details.stream_id
    assert set_stream(client, "t", False).stream_details == pb.StreamDetails(enable_stream=False)
    again = set_stream(client, "t", True, 1).stream_details
    assert again.stream_id != details.stream_id and again.last_enable_time >= details.last_enable_time
    # CreateTable takes the specification too; ListStream lists stream tables only.
    request = pb.CreateTableRequest(
        table_meta=pb.TableMeta(table_name="s", primary_key=[pb.PrimaryKeySchema(name="k", type=pb.STRING)]),
        reserved_throughput=pb.ReservedThroughput(capacity_unit=pb.CapacityUnit(read=0, write=0)),
        table_options=pb.TableOptions(time_to_live=-1, max_versions=1),
        stream_spec=pb.StreamSpecification(enable_stream=True, expiration_time=7),
    )
    call(client, "CreateTable", request, pb.CreateTableResponse)
    create(client, "plain")
    streams = call(client, "ListStream", pb.ListStreamRequest(), pb.ListStreamResponse).streams
    assert [(s.table_name, s.stream_id) for s in streams] == [
        ("s", describe(client, "s").stream_details.stream_id), ("t", again.stream_id)
    ]
    only = call(client, "ListStream", pb.ListStreamRequest(table_name="plain"), pb.ListStreamResponse)
    assert list(only.streams) == []
    stream = call(client, "DescribeStream", pb.DescribeStreamRequest(stream_id=again.stream_id),
                  pb.DescribeStreamResponse)
    assert (stream.table_name, stream.expiration_time, stream.stream_status, len(stream.shards)) == (
        "t", 1, pb.STREAM_ACTIVE, 1
    )
    assert stream.creation_time == again.last_enable_time


def test_records_for_every_write_path(ots_instance: LocalTablestore) -> None:
    client = ots_instance.client()
    create(client)
    create(client, "plain")
    set_stream(client, "t", True, 24)
    it = iterator(client, "t")
    ts = int(ots_instance.server.now() * 1000) - 5000  # an explicit timestamp, within the deviation
    client.put_row("t", Row([("id", 1)], [("a", 1), ("b", "x"), ("c", 1.5, ts)]))
    _, row, _ = client.get_row("t", [("id", 1)], max_version=1)
    put_ts = {name: ts for name, _, ts in row.attribute_columns}
    client.update_row(
        "t",
        Row([("id", 1)], {"put": [("d", True)], "delete": [("c", None, ts)], "delete_all": ["b"],
                          "increment": [("a", 41)]}),
        Condition("IGNORE"),
    )
    _, row, _ = client.get_row("t", [("id", 1)], max_version=1)
    update_ts = {name: ts for name, _, ts in row.attribute_columns}
    client.put_row("plain", Row([("id", 1)], [("a", 1)]))  # no stream: no record anywhere
    client.delete_row("t", Row([("id", 1)]), Condition("IGNORE"))
    client.delete_row("t", Row([("id", 9)]), Condition("IGNORE"))  # no such row: nothing logged
    with pytest.raises(OTSServiceError):  # a failed condition logs nothing
        client.put_row("t", Row([("id", 2)], [("a", 0)]), Condition("EXPECT_EXIST"))
    batch = BatchWriteRowRequest()
    batch.add(TableInBatchWriteRowItem("t", [
        PutRowItem(Row([("id", 2)], [("v", "two")]), Condition("IGNORE")),
        UpdateRowItem(Row([("id", 2)], {"put": [("w", 2)]}), Condition("IGNORE")),
        PutRowItem(Row([("id", 3)], [("v", "x")]), Condition("EXPECT_EXIST")),  # fails: not logged
        DeleteRowItem(Row([("id", 2)]), Condition("IGNORE")),
    ]))
    result = client.batch_write_row(batch)
    assert [r.is_ok for r in result.get_succeed_of_put() + result.get_failed_of_put()] == [True, False]

    records, _ = read(client, it)
    pk1, pk2 = [("id", 1)], [("id", 2)]
    assert [action for action, _ in records] == [
        pb.PUT_ROW, pb.UPDATE_ROW, pb.DELETE_ROW, pb.PUT_ROW, pb.UPDATE_ROW, pb.DELETE_ROW
    ]
    assert records[0][1] == (
        pk1, [("a", "put", 1, put_ts["a"]), ("b", "put", "x", put_ts["b"]), ("c", "put", 1.5, ts)], False
    )
    assert records[1][1] == (pk1, [
        ("d", "put", True, update_ts["d"]),
        ("c", "delete_one", None, ts),
        ("b", "delete_all", None, None),
        ("a", "put", 42, update_ts["a"]),  # an increment is logged as the value it produced
    ], False)
    assert records[2][1] == (pk1, [], True)
    assert records[3][1][0] == pk2 and [c[:3] for c in records[3][1][1]] == [("v", "put", "two")]
    assert records[4][1][0] == pk2 and [c[:3] for c in records[4][1][1]] == [("w", "put", 2)]
    assert records[5][1] == (pk2, [], True)


def test_paging_with_limit(ots_client: OTSClient) -> None:
    client = ots_client
    create(client)
    set_stream(client, "t", True, 24)
    it = iterator(client, "t")
    for i in range(25):
        client.put_row("t", Row([("id", i)], [("n", i)]))
    seen = []
    sizes = []
    for _ in range(4):
        records, it = read(client, it, limit=10)
        sizes.append(len(records))
        seen += [pk[0][1] for _, (pk, _, _) in records]
    assert sizes == [10, 10, 5, 0] and seen == list(range(25))
    client.delete_row("t", Row([("id", 0)]), Condition("IGNORE"))
    records, it = read(client, it)  # the last iterator goes on from where it stopped
    assert [(a, pk) for a, (pk, _, _) in records] == [(pb.DELETE_ROW, [("id", 0)])]
    assert error_of(read, client, it, 0)[:2] == (400, "OTSParameterInvalid")


def test_expiration_and_bad_iterators(ots_instance: LocalTablestore, ots_server_options: Any) -> None:
    client = ots_instance.client()
    server = ots_instance.server
    create(client)
    set_stream(client, "t", True, 2)
    stream_id = describe(client, "t").stream_details.stream_id
    start = iterator(client, "t")
    client.put_row("t", Row([("id", 1)], [("n", 1)]))
    _, caught_up = read(client, start)

    # Tampered, garbage and unknown iterators; unknown streams and shards.
    payload, _, mac = start.partition(".")
    forged = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1] + "." + mac
    for bad in (forged, "garbage", "", start + "x"):
        assert error_of(read, client, bad) == (404, *TRIMMED)
    missing = pb.DescribeStreamRequest(stream_id="t_nope")
    assert error_of(call, client, "DescribeStream", missing, pb.DescribeStreamResponse)[:2] == (
        404, "OTSObjectNotExist"
    )
    wrong_shard = pb.GetShardIteratorRequest(stream_id=stream_id, shard_id="nope")
    assert error_of(call, client, "GetShardIterator", wrong_shard, pb.GetShardIteratorResponse)[:2] == (
        404, "OTSObjectNotExist"
    )

    # Past the expiration, unread records are trimmed: an iterator before them is stale, one
    # after them still works, and a new iterator starts after the trimmed data.
    server.clock_offset += 2 * 3600 + 60
    assert error_of(read, client, start) == (404, *TRIMMED)
    assert read(client, caught_up)[0] == []
    client.put_row("t", Row([("id", 2)], [("n", 2)]))
    fresh = iterator(client, "t")
    assert [pk for _, (pk, _, _) in read(client, fresh)[0]] == [[("id", 2)]]

    # Disabling drops the stream and its records; the old iterator no longer reads.
    set_stream(client, "t", False)
    assert error_of(read, client, fresh) == (404, *TRIMMED)
    set_stream(client, "t", True, 24)
    assert describe(client, "t").stream_details.stream_id != stream_id
    assert read(client, iterator(client, "t"))[0] == []


def test_streams_survive_a_restart(tmp_path: Path) -> None:
    with local_tablestore(data_dir=str(tmp_path)) as ots:
        client = ots.client()
        create(client)
        set_stream(client, "t", True, 24)
        it = iterator(client, "t")
        client.put_row("t", Row([("id", 1)], [("n", 1)]))
        table = ots.server.storage.table(ots.instance, "t")
        plain_hooks = ots.server.hooks_for(table)  # stream tables only run the stream hook
    with local_tablestore(data_dir=str(tmp_path)) as ots:
        client = ots.client()
        records, _ = read(client, it)  # the iterator (and its key) survive too
        assert [(a, pk) for a, (pk, _, _) in records] == [(pb.PUT_ROW, [("id", 1)])]
        create(client, "plain")
        assert ots.server.hooks_for(ots.server.storage.table(ots.instance, "plain")) == []
    assert plain_hooks != []
