"""Search-index engine: schemas, Search, ComputeSplits and ParallelScan.

Requests are built with the official SDK's own classes and encoder, and responses are read back
with its decoder, so these tests exercise exactly the bytes the SDK sends and reads.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tablestore import metadata as md
from tablestore.decoder import OTSProtoBufferDecoder
from tablestore.encoder import OTSProtoBufferEncoder
from tablestore.protobuf import search_pb2 as spb

from tsmigrate.local.errors import OTSError
from tsmigrate.local.search import ScanSessions, run_search
from tsmigrate.local.search_schema import (
    IndexSchemaInfo,
    check_table_options,
    describe_response,
    load_schema,
    validate_create,
    validate_ttl_update,
)

ENCODER = OTSProtoBufferEncoder("utf-8")
DECODER = OTSProtoBufferDecoder("utf-8")
SETTINGS = settings(max_examples=60, deadline=None)
FT = md.FieldType
PK = ("gid", "uid")
TABLE = {"pk_names": PK, "table_ttl": -1, "max_versions": 1, "allow_update": True}


def fields() -> list[md.FieldSchema]:
    return [
        md.FieldSchema("k", FT.KEYWORD, index=True, enable_sort_and_agg=True),
        md.FieldSchema("t", FT.TEXT, index=True, analyzer=md.AnalyzerType.SINGLEWORD),
        md.FieldSchema("n", FT.LONG, enable_sort_and_agg=True),  # index left to the default
        md.FieldSchema("d", FT.DOUBLE, index=True, enable_sort_and_agg=True),
        md.FieldSchema("b", FT.BOOLEAN, index=True),
        md.FieldSchema("tags", FT.KEYWORD, index=True, is_array=True),
        md.FieldSchema("nums", FT.LONG, index=True, is_array=True, enable_sort_and_agg=True),
        md.FieldSchema("gid", FT.KEYWORD, index=True, enable_sort_and_agg=True),
        md.FieldSchema("hidden", FT.KEYWORD, index=False, enable_sort_and_agg=True),
    ]


def create(meta: md.SearchIndexMeta, name: str = "idx", **table: Any) -> IndexSchemaInfo:
    request = ENCODER._encode_create_search_index("t", name, meta)
    request = spb.CreateSearchIndexRequest.FromString(request.SerializeToString())
    ttl = request.time_to_live if request.HasField("time_to_live") else None
    return validate_create(request.index_name, request.schema, ttl, **{**TABLE, **table})


SCHEMA = create(md.SearchIndexMeta(fields()))


def doc(gid: str, uid: int, **columns: Any) -> tuple[Any, ...]:
    return ([("gid", gid), ("uid", uid)], columns)


def search(query: md.Query, docs: list[tuple[Any, ...]], schema: IndexSchemaInfo = SCHEMA,
           columns: md.ColumnsToGet | None = None, **options: Any) -> md.SearchResponse:
    """Runs a search end to end: SDK encoder -> wire bytes -> engine -> wire bytes -> SDK decoder."""
    request = ENCODER._encode_search("t", "idx", md.SearchQuery(query, **options), columns, None, None)
    request = spb.SearchRequest.FromString(request.SerializeToString())
    response = run_search(schema, request, docs)
    decoded, _ = DECODER._decode_search(response.SerializeToString(), "rid")
    return decoded


def ids(response: md.SearchResponse) -> list[int]:
    return [dict(pk)["uid"] for pk, _ in response.rows]


def error(call: Any, *args: Any, **kwargs: Any) -> OTSError:
    with pytest.raises(OTSError) as info:
        call(*args, **kwargs)
    return info.value


DOCS = [
    doc("a", 1, k="red", t="The quick brown Fox", n=5, d=1.5, b=True, tags='["x","y"]', nums="[3, 9]"),
    doc("a", 2, k="green", t="lazy dog, quick!", n=10, d=2.5, b=False, tags='["y"]', nums="[1]"),
    doc("b", 3, k="blue", t="brown dog", n="12", d=3, b=True, tags="not json", nums="[2, 2.5]"),
    doc("b", 4, k="redder", n=-7, d=-0.5, tags="[]", extra="zzz", hidden="h"),
    doc("c", 5, t="fox", n=10, b=False),
]


# --- schemas ---------------------------------------------------------------------------------


def test_describe_returns_what_was_created_through_the_sdk_decoder() -> None:
    meta = md.SearchIndexMeta(
        fields(), index_setting=md.IndexSetting(["gid"]),
        index_sort=md.Sort([md.FieldSort("n", md.SortOrder.DESC), md.PrimaryKeySort()]),
        time_to_live=86400 * 2,
    )
    info = create(meta, table_ttl=86400 * 3, allow_update=False)
    stored = load_schema("idx", info.schema_bytes, info.time_to_live, PK)
    body = describe_response(stored, create_time_ms=1, sync_phase=spb.INCR,
                             current_sync_timestamp_ns=42).SerializeToString()
    (described, sync), _ = DECODER._decode_describe_search_index(body, "rid")
    assert [(f.field_name, f.field_type, f.is_array, f.enable_sort_and_agg) for f in described.fields] \
        == [(f.field_name, f.field_type, bool(f.is_array), bool(f.enable_sort_and_agg)) for f in fields()]
    # index=None was sent for "n": the service's default (true) comes back, explicit false stays.
    assert {f.field_name: f.index for f in described.fields} == {
        f.field_name: f.field_name != "hidden" for f in fields()}
    assert described.time_to_live == 86400 * 2
    assert described.index_setting.routing_fields == ["gid"]
    assert [type(s).__name__ for s in described.index_sort.sorters] == ["FieldSort", "PrimaryKeySort"]
    assert described.index_sort.sorters[0].sort_order == md.SortOrder.DESC
    assert (sync.sync_phase, sync.current_sync_timestamp) == (md.SyncPhase.INCR, 42)


def test_schema_bytes_are_kept_when_no_default_is_missing() -> None:
    explicit = [md.FieldSchema("k", FT.KEYWORD, index=True, store=False, enable_sort_and_agg=True)]
    meta = md.SearchIndexMeta(explicit, index_sort=md.Sort([md.FieldSort("k")]))
    request = ENCODER._encode_create_search_index("t", "idx", meta)
    info = create(meta)
    assert info.schema_bytes == request.schema.SerializeToString()
    assert info.time_to_live == -1


def described_sorters(meta: md.SearchIndexMeta) -> list[tuple[str, Any]]:
    info = create(meta)
    body = describe_response(load_schema("idx", info.schema_bytes, -1, PK), create_time_ms=1,
                             sync_phase=spb.INCR, current_sync_timestamp_ns=1).SerializeToString()
    (described, _), _ = DECODER._decode_describe_search_index(body, "rid")
    return [(type(s).__name__, s.sort_order) for s in described.index_sort.sorters]


def test_an_index_without_presort_is_presorted_by_the_primary_key() -> None:
    """As the SDK's search_index_test expects of the service: no index_sort given, one PK sorter
    (ascending) described; none for an index with NESTED fields, which cannot be presorted."""
    plain = [md.FieldSchema("k", FT.KEYWORD)]
    assert described_sorters(md.SearchIndexMeta(plain)) == [("PrimaryKeySort", md.SortOrder.ASC)]
    assert described_sorters(md.SearchIndexMeta([*plain, nested_field()])) == []


def nested_field() -> md.FieldSchema:
    return md.FieldSchema("nest", FT.NESTED, sub_field_schemas=[md.FieldSchema("x", FT.LONG)])


BAD_SCHEMAS = [
    ([md.FieldSchema("k", FT.KEYWORD)], {"max_versions": 2}, {}, "max_versions"),
    ([md.FieldSchema("k", FT.KEYWORD)], {"table_ttl": 86400}, {}, "allow_update"),
    ([md.FieldSchema("k", FT.KEYWORD)], {"allow_update": False}, {"time_to_live": 100}, "86400"),
    ([md.FieldSchema("k", FT.KEYWORD)], {}, {"time_to_live": 86400}, "allow_update"),
    ([md.FieldSchema("k", FT.KEYWORD)], {}, {"index_setting": md.IndexSetting(["k"])},
     "Routing field [k] must be a primary key column"),
    ([nested_field()], {}, {"index_sort": md.Sort([md.PrimaryKeySort()])}, "NESTED"),
    ([md.FieldSchema("nest", FT.NESTED, enable_sort_and_agg=True,
                     sub_field_schemas=[md.FieldSchema("x", FT.LONG)])], {}, {},
     "does not support enable_sort_and_agg"),
    ([md.FieldSchema("k", FT.KEYWORD, analyzer=md.AnalyzerType.SINGLEWORD)], {}, {},
     "only supported by TEXT"),
    ([md.FieldSchema("k", FT.KEYWORD), md.FieldSchema("k", FT.LONG)], {}, {}, "Duplicated field name"),
    ([md.FieldSchema("k", FT.KEYWORD, enable_sort_and_agg=False)], {},
     {"index_sort": md.Sort([md.FieldSort("k")])}, "enable_sort_and_agg"),
    ([md.FieldSchema("k", FT.KEYWORD)], {}, {"index_sort": md.Sort([md.FieldSort("x")])},
     "not in the schema"),
    ([], {}, {}, "no field"),
]


@pytest.mark.parametrize(("sdk_fields", "table", "meta", "message"), BAD_SCHEMAS)
def test_invalid_schemas_get_the_services_error(sdk_fields: list[md.FieldSchema], table: dict[str, Any],
                                                meta: dict[str, Any], message: str) -> None:
    exc = error(create, md.SearchIndexMeta(sdk_fields, **meta), **table)
    assert (exc.status, exc.code) == (400, "OTSParameterInvalid")
    assert message in exc.message


def test_index_ttl_above_table_ttl_has_the_services_message() -> None:
    meta = md.SearchIndexMeta([md.FieldSchema("k", FT.KEYWORD)], time_to_live=86400 * 5)
    exc = error(create, meta, name="si", table_ttl=86400 * 2, allow_update=False)
    assert exc.message == ("[table ttl] must be bigger than or equal search index ttl, but table ttl "
                           "is 172800 and search index ttl is [si:432000]")


def test_unknown_field_type_is_refused() -> None:
    # field_name "a", field_type 99: not a FieldType, so the SDK cannot even build it.
    schema = spb.IndexSchema.FromString(b"\x0a\x05\x0a\x01a\x10\x63")
    exc = error(validate_create, "idx", schema, -1, **TABLE)
    assert "Unknown field type of field [a]" in exc.message


def test_ttl_updates_and_table_option_changes_keep_the_ttl_rules() -> None:
    info = create(md.SearchIndexMeta([md.FieldSchema("k", FT.KEYWORD)], time_to_live=86400 * 2),
                  allow_update=False)
    assert validate_ttl_update("idx", 86400 * 3, table_ttl=-1, allow_update=False) == 86400 * 3
    assert validate_ttl_update("idx", None, table_ttl=-1, allow_update=False) is None
    assert "allow_update" in error(validate_ttl_update, "idx", 86400, table_ttl=-1,
                                   allow_update=True).message
    check_table_options(86400 * 2, 1, False, [info])
    assert "table ttl is 86400" in error(check_table_options, 86400, 1, False, [info]).message
    assert "max_versions" in error(check_table_options, -1, 3, False, [info]).message
    check_table_options(86400, 3, True, [])  # no search index: nothing to keep


# --- queries ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("query", "expected"), [
    (md.MatchAllQuery(), [1, 2, 3, 4, 5]),
    (md.TermQuery("k", "red"), [1]),
    (md.TermQuery("n", 10), [2, 5]),
    (md.TermQuery("n", 12), []),  # "12" is a string in a LONG field: dirty data
    (md.TermQuery("d", 2.5), [2]),
    (md.TermQuery("d", 3), []),  # an Integer cell in a DOUBLE field is dirty too
    (md.TermQuery("b", False), [2, 5]),
    (md.TermQuery("t", "quick"), [1, 2]),  # TEXT: one token
    (md.TermQuery("t", "Fox"), []),  # tokens are lower-cased, terms are not analysed
    (md.TermQuery("tags", "y"), [1, 2]),
    (md.TermQuery("nums", 2), []),  # 2.5 makes the whole LONG array dirty
    (md.TermQuery("gid", "b"), [3, 4]),  # a primary-key column as a field
    (md.TermsQuery("k", ["red", "blue", "nope"]), [1, 3]),
    (md.TermsQuery("t", ["dog", "fox"]), [1, 2, 3, 5]),
    (md.PrefixQuery("k", "red"), [1, 4]),
    (md.PrefixQuery("t", "qui"), [1, 2]),
    (md.WildcardQuery("k", "?re*"), [2]),
    (md.WildcardQuery("k", "*re*"), [1, 2, 4]),
    (md.ExistsQuery("tags"), [1, 2]),  # "not json" is dirty and "[]" holds nothing
    (md.ExistsQuery("n"), [1, 2, 4, 5]),
    (md.RangeQuery("n", 0, 10), [1]),
    (md.RangeQuery("n", 0, 10, include_upper=True), [1, 2, 5]),
    (md.RangeQuery("n", range_to=5, include_upper=True), [1, 4]),
    (md.RangeQuery("k", "green", "red", include_lower=False), []),
    (md.RangeQuery("k", "green", "red", include_upper=True), [1, 2]),
    (md.RangeQuery("nums", 5), [1]),
    (md.MatchQuery("t", "quick fox"), [1, 2, 5]),
    (md.MatchQuery("t", "quick fox", operator=md.QueryOperator.AND), [1]),
    (md.MatchQuery("t", "quick brown fox", minimum_should_match=2), [1]),
    (md.MatchQuery("n", "10"), [2, 5]),
    (md.MatchPhraseQuery("t", "brown fox"), [1]),
    (md.MatchPhraseQuery("t", "fox brown"), []),
    (md.BoolQuery(must_queries=[md.TermQuery("b", True)], must_not_queries=[md.TermQuery("k", "blue")]), [1]),
    (md.BoolQuery(filter_queries=[md.RangeQuery("n", 0)], should_queries=[md.TermQuery("k", "red")]),
     [1, 2, 5]),
    (md.BoolQuery(should_queries=[md.TermQuery("k", "red"), md.TermQuery("b", False)]), [1, 2, 5]),
    (md.BoolQuery(should_queries=[md.TermQuery("t", "dog"), md.TermQuery("t", "brown"),
                                  md.TermQuery("t", "lazy")], minimum_should_match=2), [2, 3]),
    (md.BoolQuery(must_not_queries=[md.ExistsQuery("k")]), [5]),
])
def test_queries_match_what_the_service_would(query: md.Query, expected: list[int]) -> None:
    response = search(query, DOCS, limit=100)
    assert sorted(ids(response)) == expected
    assert response.is_all_succeed


@pytest.mark.parametrize(("query", "message"), [
    (md.TermQuery("extra", "zzz"), "Field [extra] does not exist"),
    (md.TermQuery("hidden", "h"), "not indexed"),
    (md.TermQuery("n", "ten"), "does not match the type LONG"),
    (md.RangeQuery("k", 1), "does not match the type KEYWORD"),
    (md.GeoDistanceQuery("k", "0,0", 10), "is not a GEO_POINT field"),
    (md.NestedQuery("nest", md.MatchAllQuery()), "is not a NESTED field"),
])
def test_bad_queries_are_refused(query: md.Query, message: str) -> None:
    exc = error(search, query, DOCS)
    assert (exc.code, message in exc.message) == ("OTSParameterInvalid", True)


long_values = st.one_of(st.integers(-50, 50), st.none(), st.just("7"), st.floats(-50, 50))


@SETTINGS
@given(values=st.lists(long_values, max_size=30), lo=st.none() | st.integers(-60, 60),
       hi=st.none() | st.integers(-60, 60), inc_lo=st.booleans(), inc_hi=st.booleans())
def test_range_query_equals_a_python_filter(values: list[Any], lo: int | None, hi: int | None,
                                            inc_lo: bool, inc_hi: bool) -> None:
    docs = [doc("g", i, n=v) if v is not None else doc("g", i) for i, v in enumerate(values)]

    def wanted(v: Any) -> bool:
        if type(v) is not int:  # missing, a string or a float: not an indexed LONG
            return False
        above = lo is None or v > lo or (inc_lo and v == lo)
        return above and (hi is None or v < hi or (inc_hi and v == hi))

    response = search(md.RangeQuery("n", lo, hi, inc_lo, inc_hi), docs, limit=100, get_total_count=True)
    expected = [i for i, v in enumerate(values) if wanted(v)]
    assert ids(response) == expected  # default order: primary key ascending
    assert response.total_count == len(expected)


# --- sorting, paging, columns ----------------------------------------------------------------


def test_field_sort_puts_missing_values_last_in_both_directions() -> None:
    asc = search(md.MatchAllQuery(), DOCS, sort=md.Sort([md.FieldSort("k", md.SortOrder.ASC)]))
    desc = search(md.MatchAllQuery(), DOCS, sort=md.Sort([md.FieldSort("k", md.SortOrder.DESC)]))
    assert ids(asc) == [3, 2, 1, 4, 5]
    assert ids(desc) == [4, 1, 2, 3, 5]


def test_array_sort_modes_and_primary_key_sort() -> None:
    by_min = md.Sort([md.FieldSort("nums", md.SortOrder.ASC)])
    by_max_desc = md.Sort([md.FieldSort("nums", md.SortOrder.DESC, md.SortMode.MAX)])
    assert ids(search(md.MatchAllQuery(), DOCS, sort=by_min)) == [2, 1, 3, 4, 5]
    assert ids(search(md.MatchAllQuery(), DOCS, sort=by_max_desc)) == [1, 2, 3, 4, 5]
    pk_desc = md.Sort([md.PrimaryKeySort(md.SortOrder.DESC)])
    assert ids(search(md.MatchAllQuery(), DOCS, sort=pk_desc)) == [5, 4, 3, 2, 1]


def test_index_sort_is_the_default_order() -> None:
    meta = md.SearchIndexMeta(fields(), index_sort=md.Sort([md.FieldSort("n", md.SortOrder.DESC)]))
    assert ids(search(md.MatchAllQuery(), DOCS, schema=create(meta))) == [2, 5, 1, 4, 3]


def test_sorting_needs_a_sortable_field() -> None:
    assert "cannot be sorted" in error(search, md.MatchAllQuery(), DOCS,
                                       sort=md.Sort([md.FieldSort("t")])).message
    assert "does not exist" in error(search, md.MatchAllQuery(), DOCS,
                                     sort=md.Sort([md.FieldSort("extra")])).message


def test_limits_offset_and_total_count() -> None:
    many = [doc("g", i, n=i) for i in range(150)]
    assert len(search(md.MatchAllQuery(), many).rows) == 10  # default limit
    assert search(md.MatchAllQuery(), many).total_count == -1
    assert ids(search(md.MatchAllQuery(), many, offset=140, limit=20)) == list(range(140, 150))
    assert len(search(md.MatchAllQuery(), many, limit=150).rows) == 150  # PK only: up to 1000
    all_columns = md.ColumnsToGet(return_type=md.ColumnReturnType.ALL)
    assert "[0, 100]" in error(search, md.MatchAllQuery(), many, columns=all_columns, limit=101).message
    assert "100000" in error(search, md.MatchAllQuery(), many, offset=99_950, limit=51).message
    counted = search(md.TermQuery("n", 3), many, get_total_count=True, limit=0)
    assert (counted.total_count, counted.rows, counted.next_token) == (1, [], b"")


doc_strategy = st.lists(st.tuples(st.sampled_from("abc"), st.none() | st.integers(0, 4)), max_size=25)
sorts = st.sampled_from([
    [md.FieldSort("n", md.SortOrder.ASC)],
    [md.FieldSort("n", md.SortOrder.DESC)],
    [md.FieldSort("k", md.SortOrder.DESC), md.FieldSort("n", md.SortOrder.ASC)],
    [md.PrimaryKeySort(md.SortOrder.DESC)],
    [md.ScoreSort()],
])


def expected_order(rows: list[tuple[str, int | None]], sorters: list[md.Sorter]) -> list[int]:
    order = sorted(range(len(rows)))  # PK ascending breaks ties
    for sorter in reversed(sorters):
        if isinstance(sorter, md.PrimaryKeySort):
            order.sort(reverse=sorter.sort_order == md.SortOrder.DESC)
        elif isinstance(sorter, md.FieldSort):
            col = 0 if sorter.field_name == "k" else 1
            # sorted(reverse=True) keeps ties stable, as the service's PK tie-break needs.
            present = sorted((i for i in order if rows[i][col] is not None), key=lambda i: rows[i][col],
                             reverse=sorter.sort_order == md.SortOrder.DESC)
            order = present + [i for i in order if rows[i][col] is None]
    return order


@SETTINGS
@given(rows=doc_strategy, sorters=sorts, limit=st.integers(1, 7))
def test_next_token_pages_through_every_match_once_in_order(
        rows: list[tuple[str, int | None]], sorters: list[md.Sorter], limit: int) -> None:
    docs = [doc("g", i, k=k, **({} if n is None else {"n": n})) for i, (k, n) in enumerate(rows)]
    seen: list[int] = []
    token = None
    for _ in range(len(docs) + 2):
        # The first page sends the sort; later pages send only the token, as the SDK allows.
        options = {"sort": md.Sort(sorters)} if token is None else {"next_token": token}
        page = search(md.MatchAllQuery(), docs, limit=limit, **options)
        seen += ids(page)
        token = page.next_token
        if not token:
            break
    assert seen == expected_order(rows, sorters)


def test_tokens_are_validated() -> None:
    docs = [doc("g", i, n=i) for i in range(5)]
    sort = md.Sort([md.FieldSort("n", md.SortOrder.DESC)])
    token = search(md.MatchAllQuery(), docs, limit=2, sort=sort).next_token
    assert token
    again = search(md.MatchAllQuery(), docs, limit=2, sort=sort, next_token=token)
    assert ids(again) == [2, 1]
    other = md.Sort([md.FieldSort("n", md.SortOrder.ASC)])
    assert "sort" in error(search, md.MatchAllQuery(), docs, sort=other, next_token=token).message
    assert "Invalid token" in error(search, md.MatchAllQuery(), docs, next_token=b"garbage!").message
    forged = json.dumps({"sort": [["pk", False]], "after": "zz"}).encode()
    assert "Invalid token" in error(search, md.MatchAllQuery(), docs,
                                    next_token=base64.urlsafe_b64encode(forged)).message
    # Well-formed but with a string where the sort field holds integers.
    wrong = {"sort": [["field", "n", True, None], ["pk", False]], "after": ["0300000000", ["0300000000"]]}
    assert "Invalid token" in error(search, md.MatchAllQuery(), docs, sort=sort,
                                    next_token=base64.urlsafe_b64encode(json.dumps(wrong).encode())).message


def test_columns_to_get_through_the_sdk_decoder() -> None:
    docs = [([("gid", "a"), ("uid", 1)], {"k": "red", "n": 5, "extra": "zzz"}, {"k": 1000, "n": 2000})]

    def columns(kind: md.ColumnReturnType, names: list[str] | None = None) -> list[tuple[Any, ...]]:
        response = search(md.MatchAllQuery(), docs, columns=md.ColumnsToGet(names, kind))
        assert response.rows[0][0] == [("gid", "a"), ("uid", 1)]
        return response.rows[0][1]

    assert columns(md.ColumnReturnType.NONE) == []
    assert columns(md.ColumnReturnType.ALL) == [("extra", "zzz", None), ("k", "red", 1000), ("n", 5, 2000)]
    assert columns(md.ColumnReturnType.SPECIFIED, ["n", "missing"]) == [("n", 5, 2000)]
    assert columns(md.ColumnReturnType.ALL_FROM_INDEX) == [("k", "red", 1000), ("n", 5, 2000)]


# --- ComputeSplits and ParallelScan ----------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def splits(sessions: ScanSessions) -> md.ComputeSplitsResponse:
    wire = ENCODER._encode_compute_splits("t", "idx").SerializeToString()
    proto = spb.ComputeSplitsRequest.FromString(wire)
    response = sessions.compute_splits(proto.table_name, proto.search_index_splits_options.index_name)
    decoded, _ = DECODER._decode_compute_splits(response.SerializeToString(), "rid")
    return decoded


def scan(sessions: ScanSessions, docs: list[tuple[Any, ...]], session_id: str | None,
         query: md.ScanQuery, columns: md.ColumnsToGet | None = None) -> md.ParallelScanResponse:
    request = ENCODER._encode_parallel_scan("t", "idx", query, session_id, columns, None)
    request = spb.ParallelScanRequest.FromString(request.SerializeToString())
    response = sessions.parallel_scan("t", SCHEMA, request, docs)
    decoded, _ = DECODER._decode_parallel_scan(response.SerializeToString(), "rid")
    return decoded


def scan_all(sessions: ScanSessions, docs: list[tuple[Any, ...]], session_id: str, query: md.Query,
             slice_id: int, parallel: int, limit: int) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    token = None
    while True:
        page = scan(sessions, docs, session_id, md.ScanQuery(query, limit, token, slice_id, parallel),
                    md.ColumnsToGet(["n"], md.ColumnReturnType.SPECIFIED))
        assert len(page.rows) <= limit
        rows += page.rows
        token = page.next_token
        if not token:
            return rows


def test_parallel_scan_slices_cover_every_match_once_in_pk_order() -> None:
    docs = [doc(g, i, n=i) for g in "ba" for i in range(40)]
    sessions = ScanSessions(splits_size=3)
    split = splits(sessions)
    assert split.splits_size == 3 and isinstance(split.session_id, str) and split.session_id
    query = md.RangeQuery("n", 10)
    slices = [scan_all(sessions, docs, split.session_id, query, p, 3, 7) for p in range(3)]
    for rows in slices:
        keys = [tuple(v for _, v in pk) for pk, _ in rows]
        assert keys == sorted(keys)
        assert all(attrs == [("n", dict(pk)["uid"], None)] for pk, attrs in rows)
    everything = sorted(tuple(v for _, v in pk) for rows in slices for pk, _ in rows)
    assert everything == sorted((g, i) for g in "ab" for i in range(10, 40))
    assert all(slices)  # the hash spreads 60 rows over all three slices


def test_parallel_scan_sessions_expire_and_limits_hold() -> None:
    clock = Clock()
    sessions = ScanSessions(clock=clock)
    session_id = splits(sessions).session_id
    docs = [doc("g", i) for i in range(3)]
    assert len(scan(sessions, docs, session_id, md.ScanQuery(md.MatchAllQuery(), 10, None, 0, 1)).rows) == 3
    bad = md.ScanQuery(md.MatchAllQuery(), 2001, None, 0, 1)
    assert "[1, 2000]" in error(scan, sessions, docs, session_id, bad).message
    too_wide = md.ScanQuery(md.MatchAllQuery(), 10, None, 0, 2)
    assert "max_parallel" in error(scan, sessions, docs, session_id, too_wide).message
    everything = md.ColumnsToGet(return_type=md.ColumnReturnType.ALL)
    ok = md.ScanQuery(md.MatchAllQuery(), 10, None, 0, 1)
    assert "RETURN_ALL" in error(scan, sessions, docs, session_id, ok, everything).message
    clock.now += 61
    exc = error(scan, sessions, docs, session_id, ok)
    assert (exc.status, exc.code) == (400, "OTSSessionExpired")
    assert exc.message == "ScanQuery'session is expired, please retry ComputeSplitsRequest and ScanQuery."
