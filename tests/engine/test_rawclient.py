"""The raw client for APIs the SDK lacks, against the local server: same signing, same errors."""

from __future__ import annotations

import pytest
import tablestore as ts
from tablestore.error import OTSServiceError
from tablestore.protobuf import search_pb2

from tsmigrate.instance.rawclient import RawClient


def _table(client: ts.OTSClient, name: str = "t", defined=(), ttl: int = -1) -> None:
    meta = ts.TableMeta(name, [("pk", "STRING"), ("n", "INTEGER")], list(defined))
    client.create_table(meta, ts.TableOptions(ttl, 1, 86400, allow_update=False),
                        ts.ReservedThroughput(ts.CapacityUnit(0, 0)))


def test_defined_columns_round_trip_through_describe(ots_client):
    _table(ots_client, defined=[("a", "STRING")])
    raw = RawClient(ots_client)
    raw.add_defined_columns("t", [("b", "INTEGER"), ("c", "DOUBLE")])
    assert ots_client.describe_table("t").table_meta.defined_columns == [
        ("a", "STRING"), ("b", "INTEGER"), ("c", "DOUBLE")
    ]
    raw.delete_defined_columns("t", ["a"])
    names = [c.name for c in raw.describe_table("t").table_meta.defined_column]
    assert names == ["b", "c"]
    with pytest.raises(OTSServiceError) as info:
        raw.add_defined_columns("t", [("pk", "STRING")])
    assert info.value.code == "OTSParameterInvalid"


def test_stream_on_off_and_records(ots_client):
    _table(ots_client)
    raw = RawClient(ots_client)
    details = raw.update_stream("t", True, 24)
    assert details.enable_stream and details.expiration_time == 24
    described = raw.describe_table("t").stream_details
    assert described.enable_stream and described.stream_id == details.stream_id
    ots_client.put_row("t", ts.Row([("pk", "a"), ("n", 1)], [("v", 1)]))
    ots_client.delete_row("t", ts.Row([("pk", "a"), ("n", 1)]), ts.Condition("IGNORE"))
    [(stream_id, table, _created)] = raw.list_streams("t")
    assert (stream_id, table) == (details.stream_id, "t")
    [shard] = raw.shards(stream_id)
    records, _next = raw.stream_records(raw.shard_iterator(stream_id, shard))
    assert [r.action for r in records] == ["put", "delete"]
    assert records[0].row.primary_key == [("pk", "a"), ("n", 1)]
    assert [(c.name, c.value) for c in records[0].row.cells] == [("v", 1)]
    raw.update_stream("t", False)
    assert not raw.describe_table("t").stream_details.enable_stream


def test_split_points_cover_the_table(ots_client):
    _table(ots_client)
    for start in range(0, 400, 100):
        request = ts.BatchWriteRowRequest()
        rows = [ts.PutRowItem(ts.Row([("pk", f"k{i:04d}"), ("n", i)], [("pad", "x" * 200)]),
                              ts.Condition("IGNORE")) for i in range(start, start + 100)]
        request.add(ts.TableInBatchWriteRowItem("t", rows))
        ots_client.batch_write_row(request)
    split = RawClient(ots_client).compute_split_points_by_size("t", 1, unit_bytes=20_000)
    assert len(split.points) >= 2
    firsts = [p[0][1] for p in split.points]
    assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)
    assert len(split.locations) == len(split.points) + 1


def test_reindex_switch_through_extended_messages(ots_client):
    _table(ots_client, defined=[("a", "STRING")])
    old = ts.SearchIndexMeta([ts.FieldSchema("a", ts.FieldType.KEYWORD)])
    ots_client.create_search_index("t", "idx", old)
    new_schema = search_pb2.IndexSchema()
    field = new_schema.field_schemas.add(field_name="a", field_type=search_pb2.KEYWORD)
    field.enable_sort_and_agg = True
    raw = RawClient(ots_client)
    raw.create_search_index_from("t", "idx_reindex", "idx", new_schema.SerializeToString())
    raw.switch_search_index("t", "idx", "idx_reindex")
    meta, _sync = ots_client.describe_search_index("t", "idx")
    assert meta.fields[0].enable_sort_and_agg is True


def test_errors_are_the_sdks_own(ots_instance):
    raw = RawClient(ots_instance.client())
    with pytest.raises(OTSServiceError) as missing:
        raw.describe_table("nope")
    assert (missing.value.http_status, missing.value.code) == (404, "OTSObjectNotExist")
    wrong = ts.OTSClient(ots_instance.endpoint, ots_instance.access_key_id, "wrong-secret",
                         ots_instance.instance, retry_policy=ts.retry.NoRetryPolicy())
    with pytest.raises(OTSServiceError) as denied:
        RawClient(wrong).list_streams()
    assert denied.value.code == "OTSAuthFailed"
