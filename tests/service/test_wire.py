"""The model layer's own GetRange and BatchWriteRow (tsmigrate/wire/rows.py) against the SDK's: the same
bytes sent, the same rows read, the same errors, through the local server."""

from datetime import datetime, timezone

import pytest
import tablestore as ts
from service_models import FAST, Reading
from tablestore import metadata as md
from tablestore.native import parse_multiple_rows
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.service import Attr, Range, Rows, create_tables
from tsmigrate.service.batch import Update
from tsmigrate.service.conditions import sdk_condition
from tsmigrate.wire import rows as wire
from tsmigrate.wire.plainbuffer import encode_row, join_rows

IGNORE = md.Condition(md.RowExistenceExpectation.IGNORE)
ODD = ["", "é ✓", "x" * 300]  # empty, non-ASCII, longer than a one-byte varint


class Mixed(Model, table="wire_mixed"):
    name = PrimaryKey(str)
    seq = PrimaryKey(int)
    text = Column(str)
    count = Column(int)
    ratio = Column(float)
    flag = Column(bool)
    blob = Column(bytes)
    seen = Column(datetime)
    label = Column(str, name="lbl")


def _sdk_row_bytes(item) -> bytes:
    proto = pb.RowInBatchWriteRowRequest()
    getattr(wire.sdk_encoder(), wire._SDK_ROWS[type(item)])(proto, item)
    return proto.SerializeToString()


@pytest.mark.parametrize("item", [
    md.PutRowItem(md.Row([("k", "a"), ("n", 1)], [("s", s) for s in ODD]), IGNORE),
    md.PutRowItem(md.Row([("k", "b"), ("n", -(1 << 63))], [
        ("i", (1 << 63) - 1), ("f", -0.5), ("t", True), ("u", False), ("by", b"\x00\xff"),
        ("ba", bytearray(b"\x00\xff")), ("e", bytearray()), ("z", 0)]), IGNORE),
    md.PutRowItem(md.Row([("k", "c")], [("s", "v", 1700000000000), ("i", 3, 5)]), IGNORE),
    md.PutRowItem(md.Row([("k", bytearray(b"\x01"))], []), None),
    md.PutRowItem(md.Row([("k", "d"), ("id", md.PK_AUTO_INCR)], [("s", "v")]), IGNORE),
    md.DeleteRowItem(md.Row([("k", "e"), ("n", 7)]), IGNORE),
    md.PutRowItem(md.Row([("k", "f")], [("s", "v")]), md.Condition(
        md.RowExistenceExpectation.EXPECT_NOT_EXIST)),
    md.PutRowItem(md.Row([("k", "g")], [("s", "v")]), md.Condition(
        md.RowExistenceExpectation.EXPECT_EXIST, md.SingleColumnCondition("v", 3, md.ComparatorType.EQUAL))),
    md.PutRowItem(md.Row([("k", "h")], [("s", "v")]), IGNORE, md.ReturnType.RT_PK),
    md.UpdateRowItem(md.Row([("k", "i")], {md.UpdateType.PUT: [("s", "v")],
                                           md.UpdateType.DELETE_ALL: ["x"],
                                           md.UpdateType.INCREMENT: [("n", 2)]}), IGNORE),
    md.DeleteRowItem(md.Row([("k", "j")]), md.Condition(md.RowExistenceExpectation.EXPECT_EXIST)),
])
def test_a_batch_row_is_the_bytes_the_sdk_sends(item):
    assert wire.batch_row(item) == _sdk_row_bytes(item)


def test_a_batch_request_holds_each_tables_rows_in_order():
    rows = {"t1": [md.PutRowItem(md.Row([("k", str(i))], [("v", i)]), IGNORE) for i in range(3)],
            "tàble": [md.DeleteRowItem(md.Row([("k", "x" * 200)]), IGNORE)]}
    body = wire.batch_write_request([(t, [wire.batch_row(i) for i in items]) for t, items in rows.items()])
    expected = pb.BatchWriteRowRequest()
    for table, items in rows.items():
        entry = expected.tables.add(table_name=table)
        for item in items:
            entry.rows.add().MergeFromString(_sdk_row_bytes(item))
    assert pb.BatchWriteRowRequest.FromString(body) == expected


@pytest.mark.parametrize("args", [
    ("t", False, [("k", md.INF_MIN)], [("k", md.INF_MAX)], None, None, None),
    ("t", True, [("k", "b"), ("n", 5)], [("k", "a"), ("n", md.INF_MIN)], ["k", "v"], 10,
     md.SingleColumnCondition("v", 3, md.ComparatorType.LESS_THAN)),
    ("t", False, [("k", bytearray(b"\x00"))], [("k", bytearray(b"\xff"))], ["v"], 5000, None),
])
def test_a_get_range_request_is_the_sdks(args):
    table, backward, start, end, columns, limit, condition = args
    sdk = wire.sdk_encoder()._encode_get_range(
        table, md.Direction.BACKWARD if backward else md.Direction.FORWARD, start, end, columns,
        limit, condition, 1, None, None, None, None, None)
    ours = wire.get_range_request(table, backward, start, end, columns, limit,
                                  wire.column_filter(condition))
    assert pb.GetRangeRequest.FromString(ours) == sdk


def test_the_python_parser_reads_a_page_as_the_native_one():
    page = join_rows(encode_row(
        [("k", key), ("n", n)],
        [("s", "", 3), ("s", "é ✓", 2), ("b", bytearray(b"\x00"), 1), ("e", bytearray(), 1),
         ("f", 1.25, 1), ("t", True, 1), ("u", False, 1), ("i", -7, 1)],
    )[4:] for key, n in (("", 0), ("a" * 300, -1), ("z", 1 << 40)))
    assert wire.parse_rows(page) == parse_multiple_rows(page)


@pytest.fixture
def mixed(client):
    create_tables(client, [Mixed])
    return Rows(Mixed, client, retry=FAST)


def _sdk_models(client, codec, start, end, columns=None, condition=None, backward=False,
                limit=None):
    """The rows of a range, read and paged by the SDK, as models."""
    models = []
    direction = md.Direction.BACKWARD if backward else md.Direction.FORWARD
    while start is not None:
        _, start, rows, _ = client.get_range(codec.table, direction, start, end, columns, limit,
                                             condition, 1)
        models += [codec.to_model(row.primary_key, row.attribute_columns) for row in rows]
    return models


def test_query_models_are_the_sdks_for_every_cell_type(client, mixed):
    when = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    written = [Mixed(name=name, seq=seq, text=text, count=seq - 2, ratio=seq / 3, flag=seq % 2 == 0,
                     blob=bytearray(range(seq * 40 % 256)), seen=when, label=text)
               for name in ("", "é") for seq, text in enumerate(ODD)]
    written.append(Mixed(name="sparse", seq=0))  # no attribute at all
    # ``bytes`` are a BINARY cell too (the SDK would send them as STRING; the codec converts).
    written.append(Mixed(name="sparse", seq=2, blob=b"\xff\x00abc"))
    assert mixed.batch_write(put=written).ok
    client.put_row(Mixed.table_name(), md.Row([("name", "sparse"), ("seq", 1)],
                                               [("text", "new"), ("undeclared", 1)]), IGNORE)
    codec = mixed.codec
    everything = _sdk_models(client, codec, [("name", md.INF_MIN), ("seq", md.INF_MIN)],
                             [("name", md.INF_MAX), ("seq", md.INF_MAX)])
    assert len(everything) == 9 and everything[0].blob == b"" and everything[1].text == "é ✓"
    by_key = {(m.name, m.seq): m for m in everything}
    assert by_key["sparse", 2].blob == b"\xff\x00abc" and by_key["", 1].blob == bytes(range(40))
    assert everything[2].seen == when and everything[2].label == "x" * 300
    assert [vars(m) for m in everything if m.name == "é"] == [
        vars(m) for m in mixed.query(name="é")]
    assert [vars(m) for m in everything if m.name == "sparse"] == [
        vars(m) for m in mixed.query(name="sparse")]
    # Columns, a filter, reverse, a limit.
    sdk = _sdk_models(client, codec, [("name", ""), ("seq", md.INF_MAX)], [("name", ""), ("seq", md.INF_MIN)],
                      ["name", "seq", "count"], sdk_condition(Attr("count") < 0, codec),
                      backward=True)
    ours = list(mixed.query(name="", columns=["count"], filter=Attr("count") < 0, reverse=True))
    assert [vars(m) for m in ours] == [vars(m) for m in sdk] and len(ours) == 2
    assert [m.seq for m in mixed.query(name="é", seq=Range(gt=0), limit=1)] == [1]


@pytest.mark.slow
def test_paging_across_full_pages_of_rows_and_of_bytes(readings, client):
    # 5,000 rows fill a page; rows of 400 KB fill 4 MB first: both go on to the end.
    assert readings.batch_write(put=(Reading(device_id="a", ts=i, battery=i % 7)
                                     for i in range(12_000))).ok
    assert [r.ts for r in readings.query(device_id="a")] == list(range(12_000))
    assert readings.batch_write(put=(Reading(device_id="b", ts=i, payload=bytearray(400_000))
                                     for i in range(25))).ok
    found = list(readings.query(device_id="b", reverse=True))
    assert [r.ts for r in found] == list(range(24, -1, -1)) and found[0].payload == bytes(400_000)


def test_errors_are_the_sdks(client, mixed):
    class Missing(Model, table="wire_missing"):
        k = PrimaryKey(str)

    with pytest.raises(ts.OTSServiceError) as sdk:
        client.get_range("wire_missing", md.Direction.FORWARD, [("k", md.INF_MIN)],
                         [("k", md.INF_MAX)], None, None, None, 1)
    with pytest.raises(ts.OTSServiceError) as ours:
        list(Rows(Missing, client, retry=FAST).query())
    assert (ours.value.code, ours.value.message) == (sdk.value.code, sdk.value.message)
    # A row the service refuses fails with the service's error; the others are written.
    rows = [Mixed(name="ok", seq=1), Mixed(name="big", seq=1, text="x" * 3_000_000),
            Mixed(name="ok", seq=2)]
    request = md.BatchWriteRowRequest()
    request.add(md.TableInBatchWriteRowItem(Mixed.table_name(), [md.PutRowItem(
        md.Row(mixed.codec.row_key(row), mixed.codec.row_attributes(row)), IGNORE) for row in rows]))
    _, refused = client.batch_write_row(request).get_put()
    result = mixed.batch_write(put=rows)
    assert result.written == 2 and [(f.key, f.error_code, f.error_message) for f in result.failures] == [
        ([("name", "big"), ("seq", 1)], refused[0].error_code, refused[0].error_message)]
    # Conditions and updates go through the SDK's encoder, answers row by row.
    result = mixed.batch_write(update=[Update({"name": "ok", "seq": 1}, set={"count": 5}),
                                       Update({"name": "none", "seq": 1}, set={"count": 5},
                                              expect="exist")])
    assert result.written == 1 and result.failures[0].error_code == "OTSConditionCheckFail"
    assert mixed.get(name="ok", seq=1).count == 5 and mixed.get(name="none", seq=1) is None


@pytest.mark.slow
def test_a_batch_goes_to_the_side_the_rewrites_phase_names(ots_instance):
    # The encoded request while writes stay on the source; translated by the routed client (the
    # SDK's request) once the switch sends them to the target; sync and asyncio alike.
    import asyncio

    import cutover_tables as ct
    from cutover_tables import Counter

    from tsmigrate.service import AsyncRows, routing

    client = ct.ready(ots_instance)

    def stored(table, key):
        _, row, _ = client.get_row(table, key, max_version=1)
        return None if row is None else dict((c[0], c[1]) for c in row.attribute_columns)

    async def async_batch(rows):
        async_client = ots_instance.async_client()
        try:
            return await AsyncRows(Counter, async_client).batch_write(put=rows)
        finally:
            await async_client.close()

    old = Rows(Counter, client)
    assert old.batch_write(put=[Counter(device="dB", seq=500, count=1)], delete=[
        {"device": "d1", "seq": 1}]).ok
    assert asyncio.run(async_batch([Counter(device="dB", seq=502, count=3)])).ok
    assert stored("counters", [("device", "dB"), ("seq", 500)]) == {"count": 1}
    assert stored("counters", [("device", "dB"), ("seq", 502)]) == {"count": 3}
    assert stored("counters", [("device", "d1"), ("seq", 1)]) is None
    assert stored("counters_by_seq", [("seq", 500), ("device", "dB")]) is None
    ct.switch(client)
    routing.clear()
    assert old.batch_write(put=[Counter(device="dB", seq=501, count=2, note="after")], delete=[
        {"device": "d2", "seq": 2}]).ok
    routing.clear()
    assert asyncio.run(async_batch([Counter(device="dB", seq=503, count=4)])).ok
    assert stored("counters_by_seq", [("seq", 501), ("device", "dB")]) == {"count": 2, "note": "after"}
    assert stored("counters_by_seq", [("seq", 503), ("device", "dB")]) == {"count": 4}
    assert stored("counters_by_seq", [("seq", 2), ("device", "d2")]) is None
    assert stored("counters", [("device", "dB"), ("seq", 501)]) is None  # until reverse capture
    assert stored("counters", [("device", "d2"), ("seq", 2)]) is not None
