"""Search-index APIs of the local server through the SDK, and the reindex fields through raw requests.

The reindex fields exist only in the Java SDK's proto; the raw requests here are built from
`tsmigrate.wire.search_protocol` and signed with the SDK's own signer.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from tablestore import (
    BoolQuery,
    CapacityUnit,
    ColumnReturnType,
    ColumnsToGet,
    FieldSchema,
    FieldSort,
    FieldType,
    IndexSetting,
    MatchAllQuery,
    OTSClient,
    OTSServiceError,
    PrimaryKeySort,
    RangeQuery,
    ReservedThroughput,
    Row,
    ScanQuery,
    SearchIndexMeta,
    SearchQuery,
    Sort,
    SortOrder,
    SyncPhase,
    TableMeta,
    TableOptions,
    TermQuery,
)
from tablestore.auth import SignV2
from tablestore.protobuf import search_pb2 as spb
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local.auth import Credentials
from tsmigrate.local.context import ServerOptions
from tsmigrate.local.server import LocalServer
from tsmigrate.local.testing import LocalTablestore, local_tablestore
from tsmigrate.wire import search_protocol as sp

CU0 = ReservedThroughput(CapacityUnit(0, 0))
DAY = 86400
ROWS = 25


def fields() -> list[FieldSchema]:
    return [
        FieldSchema("k", FieldType.KEYWORD, index=True, enable_sort_and_agg=True),
        FieldSchema("n", FieldType.LONG, enable_sort_and_agg=True),  # index left to the default
        FieldSchema("t", FieldType.TEXT, index=True),
    ]


def make_table(client: OTSClient, name: str = "t", **options: Any) -> None:
    client.create_table(TableMeta(name, [("gid", "STRING"), ("uid", "INTEGER")]),
                        TableOptions(**options), CU0)


def fill(client: OTSClient, table: str = "t", count: int = ROWS) -> None:
    for i in range(count):
        client.put_row(table, Row([("gid", "g"), ("uid", i)],
                                  [("k", f"k{i % 5}"), ("n", i), ("t", f"word{i % 3} common")]))


def error_of(call: Callable[..., Any], *args: Any, **kwargs: Any) -> OTSServiceError:
    with pytest.raises(OTSServiceError) as info:
        call(*args, **kwargs)
    return info.value


def uids(rows: list[Any]) -> list[int]:
    return [dict(pk)["uid"] for pk, _ in rows]


# -- metadata APIs -----------------------------------------------------------------------------


def test_create_describe_list_update_delete(ots_client: OTSClient) -> None:
    client = ots_client
    make_table(client, allow_update=False)
    make_table(client, "t2")
    before_ns = time.time_ns()
    client.create_search_index("t", "idx", SearchIndexMeta(fields()))
    client.create_search_index("t", "other", SearchIndexMeta(fields(), time_to_live=2 * DAY))
    client.create_search_index("t2", "idx", SearchIndexMeta(fields()))
    meta, sync = client.describe_search_index("t", "idx")
    assert [(f.field_name, f.field_type, f.index) for f in meta.fields] == [
        ("k", FieldType.KEYWORD, True), ("n", FieldType.LONG, True), ("t", FieldType.TEXT, True)]
    assert meta.time_to_live == -1
    assert sync.sync_phase == SyncPhase.INCR
    assert before_ns <= sync.current_sync_timestamp <= time.time_ns()
    assert client.describe_search_index("t", "other")[0].time_to_live == 2 * DAY
    assert client.list_search_index() == [("t", "idx"), ("t", "other"), ("t2", "idx")]
    assert client.list_search_index("t2") == [("t2", "idx")]

    e = error_of(client.create_search_index, "t", "idx", SearchIndexMeta(fields()))
    assert (e.code, e.message) == ("OTSObjectAlreadyExist", "search index [idx] already exists")
    e = error_of(client.create_search_index, "nope", "idx", SearchIndexMeta(fields()))
    assert (e.code, e.message) == ("OTSParameterInvalid", "table [nope] does not exist")

    client.update_search_index("t", "idx", SearchIndexMeta(None, time_to_live=3 * DAY))
    assert client.describe_search_index("t", "idx")[0].time_to_live == 3 * DAY
    e = error_of(client.update_search_index, "t", "idx", SearchIndexMeta(None, time_to_live=100))
    assert e.code == "OTSParameterInvalid" and "86400" in e.message
    # The index TTL needs UpdateRow disabled on the table.
    e = error_of(client.update_search_index, "t2", "idx", SearchIndexMeta(None, time_to_live=DAY))
    assert e.code == "OTSParameterInvalid" and "allow_update=false" in e.message
    assert client.describe_search_index("t2", "idx")[0].time_to_live == -1

    client.delete_search_index("t", "idx")
    for call, args in [(client.describe_search_index, ()), (client.delete_search_index, ()),
                       (client.update_search_index, (SearchIndexMeta(None, time_to_live=-1),)),
                       (client.search, (SearchQuery(MatchAllQuery()),)),
                       (client.compute_splits, ())]:
        e = error_of(call, "t", "idx", *args)
        assert (e.code, e.message) == ("OTSMetaNotMatch", "search index [idx] does not exist")
    assert client.list_search_index() == [("t", "other"), ("t2", "idx")]


def test_schema_validation_errors_change_nothing(ots_client: OTSClient) -> None:
    client = ots_client
    make_table(client, "versions", max_version=2)
    make_table(client, "ttl", time_to_live=DAY)  # allow_update stays true
    make_table(client)
    cases: list[tuple[str, SearchIndexMeta, str]] = [
        ("versions", SearchIndexMeta(fields()), "max_versions of the table must be 1"),
        ("ttl", SearchIndexMeta(fields()), "must disable UpdateRow"),
        ("t", SearchIndexMeta(fields(), index_setting=IndexSetting(routing_fields=["k"])),
         "Routing field [k] must be a primary key column"),
        ("t", SearchIndexMeta([FieldSchema("k", FieldType.KEYWORD, analyzer="single_word")]),
         "Analyzer is only supported by TEXT fields"),
        ("t", SearchIndexMeta([FieldSchema("k", FieldType.KEYWORD)] * 2), "Duplicated field name"),
        ("t", SearchIndexMeta(fields(), time_to_live=DAY), "allow_update=false"),
        ("t", SearchIndexMeta([]), "has no field"),
    ]
    for table, meta, message in cases:
        e = error_of(client.create_search_index, table, "idx", meta)
        assert e.code == "OTSParameterInvalid" and message in e.message, (table, e.message)
    e = error_of(client.create_search_index, "t", "bad-name", SearchIndexMeta(fields()))
    assert (e.code, e.message) == ("OTSParameterInvalid", "Invalid index name: 'bad-name'.")
    assert client.list_search_index() == []


def test_full_sync_phase_and_creating_quota(ots_client: OTSClient,
                                            ots_server_options: ServerOptions) -> None:
    client = ots_client
    make_table(client)
    ots_server_options.search_full_sync_s = 3600
    for i in range(10):
        client.create_search_index("t", f"i{i}", SearchIndexMeta(fields()))
    _, sync = client.describe_search_index("t", "i0")
    assert sync.sync_phase == SyncPhase.FULL
    e = error_of(client.create_search_index, "t", "i10", SearchIndexMeta(fields()))
    assert (e.code, e.message) == (
        "OTSQuotaExhausted", "the number of index in creating has exceed the instance quota, limit: 10")
    ots_server_options.search_full_sync_s = 0
    assert client.describe_search_index("t", "i0")[1].sync_phase == SyncPhase.INCR
    client.create_search_index("t", "i10", SearchIndexMeta(fields()))


def test_table_apis_and_search_indexes(ots_instance: LocalTablestore) -> None:
    client = ots_instance.client()
    make_table(client)
    client.create_search_index("t", "idx", SearchIndexMeta(fields()))
    e = error_of(client.delete_table, "t")
    assert (e.code, e.message) == (
        "OTSParameterInvalid", "Table[t] who has at least one search index cannot be deleted.")
    e = error_of(client.update_table, "t", TableOptions(max_version=2))
    assert e.code == "OTSParameterInvalid" and "max_versions" in e.message
    assert client.describe_table("t").table_options.max_version == 1
    # Search indexes do not count against the 64-table quota.
    for i in range(63):
        make_table(client, f"q{i}")
    e = error_of(make_table, client, "one_too_many")
    assert (e.code, e.message) == ("OTSQuotaExhausted", "Number of tables exceeded the quota.")
    client.delete_search_index("t", "idx")
    client.update_table("t", TableOptions(max_version=2))
    client.delete_table("t")
    assert "t" not in client.list_table()


# -- Search ------------------------------------------------------------------------------------


def test_search_queries_pagination_sort_and_columns(ots_client: OTSClient) -> None:
    client = ots_client
    make_table(client)
    fill(client, count=ROWS - 1)
    client.create_search_index("t", "idx", SearchIndexMeta(fields()))
    # Rows written after the index was created are searchable at once; deleted ones vanish.
    client.put_row("t", Row([("gid", "g"), ("uid", ROWS - 1)],
                            [("k", "k4"), ("n", ROWS - 1), ("t", "word0 common")]))
    client.put_row("t", Row([("gid", "g"), ("uid", 99)], [("k", "gone")]))
    client.delete_row("t", Row([("gid", "g"), ("uid", 99)]), None)

    resp = client.search("t", "idx", SearchQuery(TermQuery("k", "k2"), get_total_count=True))
    assert uids(resp.rows) == [2, 7, 12, 17, 22] and resp.total_count == 5
    assert resp.rows[0][1] == []  # columns_to_get defaults to none: PK only
    assert client.search("t", "idx", SearchQuery(TermQuery("k", "gone"))).rows == []

    query = BoolQuery(must_queries=[RangeQuery("n", 5, 20, include_lower=True)],
                      must_not_queries=[TermQuery("k", "k0")])
    expected = [i for i in range(5, 20) if i % 5]
    seen: list[int] = []
    token = None
    while True:
        resp = client.search("t", "idx", SearchQuery(query, limit=5, next_token=token,
                                                     get_total_count=True))
        assert resp.total_count == len(expected)
        seen += uids(resp.rows)
        token = resp.next_token
        if not token:
            break
    assert seen == expected

    by_n = Sort([FieldSort("n", SortOrder.DESC)])
    resp = client.search("t", "idx", SearchQuery(RangeQuery("n", 20), sort=by_n, limit=3))
    assert uids(resp.rows) == [24, 23, 22]
    by_pk = Sort([PrimaryKeySort(SortOrder.DESC)])
    resp = client.search("t", "idx", SearchQuery(TermQuery("t", "word1"), sort=by_pk, limit=2))
    assert uids(resp.rows) == [22, 19]

    some = ColumnsToGet(["n"], ColumnReturnType.SPECIFIED)
    resp = client.search("t", "idx", SearchQuery(TermQuery("k", "k3"), limit=1), columns_to_get=some)
    assert [c[:2] for c in resp.rows[0][1]] == [("n", 3)]
    every = ColumnsToGet(return_type=ColumnReturnType.ALL)
    resp = client.search("t", "idx", SearchQuery(TermQuery("k", "k3"), limit=1), columns_to_get=every)
    (pk, columns), = resp.rows
    assert pk == [("gid", "g"), ("uid", 3)]
    assert [c[:2] for c in columns] == [("k", "k3"), ("n", 3), ("t", "word0 common")]
    assert all(isinstance(c[2], int) and c[2] > 0 for c in columns)  # cell timestamps

    e = error_of(client.search, "t", "idx", SearchQuery(TermQuery("missing", "x")))
    assert e.code == "OTSParameterInvalid" and "[missing]" in e.message
    e = error_of(client.search, "nope", "idx", SearchQuery(MatchAllQuery()))
    assert (e.code, e.message) == ("OTSParameterInvalid", "table [nope] does not exist")


def test_compute_splits_and_parallel_scan_cover_every_row_once() -> None:
    options = ServerOptions(search_splits_size=3, instances={"local"})
    server = LocalServer(Credentials({"ak": "sk"}), options=options).start()
    try:
        client = OTSClient(server.endpoint, "ak", "sk", "local")
        make_table(client)
        fill(client)
        client.create_search_index("t", "idx", SearchIndexMeta(fields()))
        splits = client.compute_splits("t", "idx")
        assert splits.splits_size == 3
        seen: list[int] = []
        for part in range(3):
            token = None
            while True:
                resp = client.parallel_scan(
                    "t", "idx", ScanQuery(MatchAllQuery(), 4, token, part, 3),
                    splits.session_id, ColumnsToGet(["n"], ColumnReturnType.SPECIFIED))
                assert len(resp.rows) <= 4
                seen += [{c[0]: c[1] for c in cols}["n"] for _, cols in resp.rows]
                token = resp.next_token
                if not token:
                    break
        assert sorted(seen) == list(range(ROWS))
        e = error_of(client.compute_splits, "nope", "idx")
        assert (e.code, e.message) == ("OTSParameterInvalid", "table [nope] does not exist")
        e = error_of(client.parallel_scan, "t", "nope", ScanQuery(MatchAllQuery(), 4, None, 0, 1),
                     splits.session_id)
        assert (e.code, e.message) == ("OTSMetaNotMatch", "search index [nope] does not exist")
    finally:
        server.close()


def test_restart_keeps_search_indexes(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    with local_tablestore(data_dir=data) as ots:
        client = ots.client()
        make_table(client, allow_update=False)
        fill(client, count=5)
        client.create_search_index("t", "idx", SearchIndexMeta(fields(), time_to_live=2 * DAY))
    with local_tablestore(data_dir=data) as ots:
        client = ots.client()
        assert client.list_search_index() == [("t", "idx")]
        meta, _ = client.describe_search_index("t", "idx")
        assert [f.field_name for f in meta.fields] == ["k", "n", "t"] and meta.time_to_live == 2 * DAY
        resp = client.search("t", "idx", SearchQuery(RangeQuery("n", 3), get_total_count=True))
        assert uids(resp.rows) == [3, 4] and resp.total_count == 2
        assert error_of(client.delete_table, "t").code == "OTSParameterInvalid"


# -- reindex (raw requests with the Java proto's fields) ---------------------------------------


def raw(ots: LocalTablestore, api: str, message: Any) -> tuple[int, bytes]:
    """POST a message signed the way the SDK signs it."""
    body = message.SerializeToString()
    headers = {
        "x-ots-date": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
        "x-ots-apiversion": "2015-12-31",
        "x-ots-accesskeyid": ots.access_key_id,
        "x-ots-instancename": ots.instance,
        "x-ots-contentmd5": base64.b64encode(hashlib.md5(body).digest()).decode(),
    }
    client = ots.client()
    context = type(
        "Ctx", (), {"get_credentials": lambda self: client.credentials_provider.get_credentials()}
    )()
    SignV2("utf-8").make_request_signature_and_add_headers("/" + api, headers, context)
    url = urlparse(ots.endpoint)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        conn.request("POST", "/" + api, body, headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def ok(ots: LocalTablestore, api: str, message: Any) -> bytes:
    status, body = raw(ots, api, message)
    assert status == 200, pb.Error.FromString(body)
    return body


def failed(ots: LocalTablestore, api: str, message: Any) -> str:
    status, body = raw(ots, api, message)
    error = pb.Error.FromString(body)
    assert (status, error.code) == (400, "OTSParameterInvalid"), error
    return error.message


def describe(ots: LocalTablestore, index: str) -> Any:
    request = spb.DescribeSearchIndexRequest(table_name="t", index_name=index)
    return sp.DescribeSearchIndexResponse.FromString(ok(ots, "DescribeSearchIndex", request))


def weights(resp: Any) -> dict[str, int]:
    return {w.index_name: w.weight for w in resp.query_flow_weight}


def test_reindex_weights_and_switch(ots_instance: LocalTablestore,
                                    ots_server_options: ServerOptions) -> None:
    ots, client = ots_instance, ots_instance.client()
    make_table(client)
    fill(client, count=6)
    client.create_search_index("t", "idx", SearchIndexMeta(fields()))
    new = sp.CreateSearchIndexRequest(table_name="t", index_name="idx_reindex", source_index_name="idx")
    new.schema.field_schemas.add(field_name="k", field_type=spb.KEYWORD)
    new.schema.field_schemas.add(field_name="n", field_type=spb.DOUBLE)  # LONG -> DOUBLE
    new.schema.field_schemas.add(field_name="extra", field_type=spb.KEYWORD)

    bad = sp.CreateSearchIndexRequest(table_name="t", index_name="idx_copy", source_index_name="idx",
                                      schema=new.schema)
    assert "must end with _reindex" in failed(ots, "CreateSearchIndex", bad)
    bad.index_name, bad.source_index_name = "nope_reindex", "nope"
    status, body = raw(ots, "CreateSearchIndex", bad)
    assert (status, pb.Error.FromString(body).code) == (400, "OTSMetaNotMatch")

    ots_server_options.search_full_sync_s = 3600
    ots.server.clock_offset += 7200  # the source is two hours old: past its FULL phase
    ok(ots, "CreateSearchIndex", new)
    again = sp.CreateSearchIndexRequest(table_name="t", index_name="idx2_reindex",
                                        source_index_name="idx", schema=new.schema)
    assert "already in a reindex process" in failed(ots, "CreateSearchIndex", again)
    source, canary = describe(ots, "idx"), describe(ots, "idx_reindex")
    assert (source.brother_index_name, canary.brother_index_name) == ("idx_reindex", "idx")
    assert canary.sync_stat.sync_phase == spb.FULL and source.sync_stat.sync_phase == spb.INCR
    assert canary.index_status.status == sp.RUNNING and canary.create_time > 0
    switch = sp.UpdateSearchIndexRequest(table_name="t", index_name="idx", switch_index_name="idx_reindex")
    assert "still in full sync" in failed(ots, "UpdateSearchIndex", switch)
    ots_server_options.search_full_sync_s = 0

    # A/B traffic: with all of it on the canary, a Search on the source uses the new schema.
    flow = sp.UpdateSearchIndexRequest(table_name="t", index_name="idx")
    flow.query_flow_weight.add(index_name="idx", weight=0)
    flow.query_flow_weight.add(index_name="idx_reindex", weight=90)
    assert "sum to 100" in failed(ots, "UpdateSearchIndex", flow)
    flow.query_flow_weight[1].weight = 100
    ok(ots, "UpdateSearchIndex", flow)
    assert weights(describe(ots, "idx")) == weights(describe(ots, "idx_reindex")) == {
        "idx": 0, "idx_reindex": 100}
    assert client.search("t", "idx", SearchQuery(RangeQuery("n", 4.5))).rows == []  # DOUBLE vs Integer
    flow.query_flow_weight[0].weight, flow.query_flow_weight[1].weight = 100, 0
    ok(ots, "UpdateSearchIndex", flow)
    assert uids(client.search("t", "idx", SearchQuery(RangeQuery("n", 4))).rows) == [4, 5]

    added = sp.UpdateSearchIndexRequest(table_name="t", index_name="idx")
    added.added_field_schemas.add(field_name="z", field_type=spb.KEYWORD)
    assert "added_field_schemas is not supported" in failed(ots, "UpdateSearchIndex", added)
    wrong = sp.UpdateSearchIndexRequest(table_name="t", index_name="idx", switch_index_name="other")
    assert "is not the reindex brother" in failed(ots, "UpdateSearchIndex", wrong)

    ok(ots, "UpdateSearchIndex", switch)
    meta, _ = client.describe_search_index("t", "idx")
    assert [(f.field_name, f.field_type) for f in meta.fields] == [
        ("k", FieldType.KEYWORD), ("n", FieldType.DOUBLE), ("extra", FieldType.KEYWORD)]
    assert [f.field_name for f in client.describe_search_index("t", "idx_reindex")[0].fields] == [
        "k", "n", "t"]
    assert weights(describe(ots, "idx")) == {}
    client.search("t", "idx", SearchQuery(TermQuery("extra", "x")))  # the new field is queryable
    assert client.list_search_index("t") == [("t", "idx"), ("t", "idx_reindex")]

    client.delete_search_index("t", "idx_reindex")
    assert not describe(ots, "idx").HasField("brother_index_name")
    assert "is not in a reindex process" in failed(ots, "UpdateSearchIndex", switch)
    # The SDK's own UpdateSearchIndex (TTL only) still parses on the extended message.
    e = error_of(client.update_search_index, "t", "idx", SearchIndexMeta(None, time_to_live=DAY))
    assert "allow_update=false" in e.message


def test_parallel_scan_ends_with_an_empty_page_and_the_service_errors(ots_client: OTSClient) -> None:
    """As the SDK's parallel_scan_test: the last rows come with a token, then an empty page
    without one; the parameter errors carry the service's texts."""
    make_table(ots_client)
    fill(ots_client, count=100)
    ots_client.create_search_index("t", "idx", SearchIndexMeta(fields()))
    splits = ots_client.compute_splits("t", "idx")
    assert splits.splits_size == 1 and splits.session_id
    everything = ColumnsToGet(return_type=ColumnReturnType.ALL_FROM_INDEX)
    token = None
    pages = []
    for _ in range(3):
        query = ScanQuery(MatchAllQuery(), limit=70, next_token=token, current_parallel_id=0, max_parallel=1,
                          alive_time=30)
        response = ots_client.parallel_scan("t", "idx", query, splits.session_id, columns_to_get=everything)
        pages.append((len(response.rows), bool(response.next_token)))
        token = response.next_token
    assert pages == [(70, True), (30, True), (0, False)]
    wrong_id = ScanQuery(MatchAllQuery(), limit=70, next_token=None, current_parallel_id=101, max_parallel=1)
    e = error_of(ots_client.parallel_scan, "t", "idx", wrong_id, splits.session_id, columns_to_get=everything)
    assert (e.get_http_status(), e.code, e.message) == (
        400, "OTSParameterInvalid",
        "[parallel_scan.current_parallel_id] must in [0, max_parallel), current max_parallel is 1, "
        "current_parallel_id is 101")
    too_wide = ScanQuery(MatchAllQuery(), limit=70, next_token=None, current_parallel_id=0, max_parallel=2)
    e = error_of(ots_client.parallel_scan, "t", "idx", too_wide, splits.session_id, columns_to_get=everything)
    assert (e.code, e.message) == (
        "OTSParameterInvalid", "[parallel_scan.max_parallel_id] must in (0 ,1], current max_parallel_id is 2")
    e = error_of(ots_client.compute_splits, "t", None)
    assert (e.code, e.message) == ("OTSParameterInvalid", "[search index splits options] must not be null")
    e = error_of(ots_client.compute_splits, "t", "not_exist")
    assert (e.code, e.message) == ("OTSMetaNotMatch", "search index [not_exist] does not exist")


def reindex_request(index: str, source: str = "idx") -> Any:
    request = sp.CreateSearchIndexRequest(table_name="t", index_name=index, source_index_name=source)
    request.schema.field_schemas.add(field_name="k", field_type=spb.KEYWORD)
    request.schema.field_schemas.add(field_name="n", field_type=spb.LONG)
    request.schema.field_schemas.add(field_name="extra", field_type=spb.KEYWORD)
    return request


def test_a_reindex_builds_from_the_rows_then_follows_writes(ots_instance: LocalTablestore,
                                                            ots_server_options: ServerOptions) -> None:
    """In FULL the reindex holds the first rows in key order, in proportion to the time elapsed,
    and DescribeSearchIndex counts them; in INCR it holds every row, new writes included."""
    ots, client = ots_instance, ots_instance.client()
    make_table(client)
    fill(client, count=20)
    client.create_search_index("t", "idx", SearchIndexMeta(fields()))
    ots_server_options.search_full_sync_s = 1000  # long enough that real time moves nothing
    ots.server.clock_offset += 2000  # the source is past its own FULL phase
    ok(ots, "CreateSearchIndex", reindex_request("idx_reindex"))

    everything = SearchQuery(MatchAllQuery(), limit=100, get_total_count=True)
    canary = describe(ots, "idx_reindex")
    assert (canary.sync_stat.sync_phase, canary.metering_info.row_count) == (spb.FULL, 0)
    assert client.search("t", "idx_reindex", everything).total_count == 0
    ots.server.clock_offset += 250  # a quarter of the full sync
    assert describe(ots, "idx_reindex").metering_info.row_count == 5
    assert uids(client.search("t", "idx_reindex", everything).rows) == [0, 1, 2, 3, 4]
    assert client.search("t", "idx", everything).total_count == 20  # the source is whole

    ots.server.clock_offset += 800  # the full sync is over
    canary = describe(ots, "idx_reindex")
    assert canary.sync_stat.sync_phase == spb.INCR
    assert canary.metering_info.row_count == describe(ots, "idx").metering_info.row_count == 20
    client.put_row("t", Row([("gid", "g"), ("uid", 99)], [("k", "new"), ("extra", "x")]))
    assert uids(client.search("t", "idx_reindex", SearchQuery(TermQuery("extra", "x"))).rows) == [99]
    client.delete_row("t", Row([("gid", "g"), ("uid", 0)]), None)
    assert client.search("t", "idx_reindex", everything).total_count == 20
    now_ns = (time.time() + ots.server.clock_offset) * 1e9
    assert abs(describe(ots, "idx_reindex").sync_stat.current_sync_timestamp - now_ns) < 60e9


def test_at_most_five_rebuilds_at_once(ots_instance: LocalTablestore,
                                       ots_server_options: ServerOptions) -> None:
    """'You can rebuild up to five indexes at the same time': a sixth reindex waits until one of
    them caught up (left FULL) or switched."""
    ots, client = ots_instance, ots_instance.client()
    make_table(client)
    for i in range(6):
        client.create_search_index("t", f"idx{i}", SearchIndexMeta(fields()))
    ots_server_options.search_full_sync_s = 100
    ots.server.clock_offset += 200
    for i in range(5):
        ok(ots, "CreateSearchIndex", reindex_request(f"idx{i}_reindex", f"idx{i}"))
    status, body = raw(ots, "CreateSearchIndex", reindex_request("idx5_reindex", "idx5"))
    error = pb.Error.FromString(body)
    assert (status, error.code) == (403, "OTSQuotaExhausted")
    assert "limit: 5" in error.message
    ots.server.clock_offset += 150  # the batch caught up
    ok(ots, "CreateSearchIndex", reindex_request("idx5_reindex", "idx5"))


def test_describe_reports_the_default_presort_through_the_sdk(ots_client: OTSClient) -> None:
    make_table(ots_client)
    ots_client.create_search_index("t", "idx", SearchIndexMeta(fields()))
    meta, _ = ots_client.describe_search_index("t", "idx")
    assert [(type(s).__name__, s.sort_order) for s in meta.index_sort.sorters] == [
        ("PrimaryKeySort", SortOrder.ASC)]
