"""Field semantics of Search through the server and the official SDK, on the data set of the
SDK's search_index_test.py: values given as strings for numeric fields, DATE fields with their
date_formats, geo queries, nested queries, analyzers and KNN vectors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tablestore import (
    BatchWriteRowRequest,
    BoolQuery,
    CapacityUnit,
    Collapse,
    ColumnReturnType,
    ColumnsToGet,
    Condition,
    FieldSchema,
    FieldType,
    FieldValueFactor,
    FunctionScoreQuery,
    GeoBoundingBoxQuery,
    GeoDistanceQuery,
    GeoHashPrecision,
    GeoPolygonQuery,
    GroupByComposite,
    GroupByField,
    GroupByGeoGrid,
    Highlight,
    HighlightEncoder,
    HighlightFragmentOrder,
    HighlightParameter,
    KnnVectorQuery,
    MatchAllQuery,
    MatchPhraseQuery,
    MatchQuery,
    NestedQuery,
    OTSClient,
    OTSServiceError,
    Percentiles,
    PrimaryKeySort,
    PutRowItem,
    QueryOperator,
    RangeQuery,
    ReservedThroughput,
    Row,
    ScoreSort,
    SearchIndexMeta,
    SearchQuery,
    Sort,
    SortOrder,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
    TermQuery,
    TermsQuery,
)
from tablestore.metadata import (
    AnalyzerType,
    FuzzyAnalyzerParameter,
    VectorDataType,
    VectorMetricType,
    VectorOptions,
)

from tsmigrate.local.testing import LocalTablestore

ROWS = 1000
NAMES = "马尔代夫巴厘岛苏梅岛"
TITLES = ["菊花茶", "我爱喝花茶", "菊花开了", "茶叶蛋", "一杯菊花茶和一杯红茶", "今天天气不错", "花茶的做法",
          "红茶", "绿茶", "喝茶"]
ALL = ColumnsToGet(return_type=ColumnReturnType.ALL)


def index_fields() -> list[FieldSchema]:
    return [
        FieldSchema("k", FieldType.KEYWORD, index=True, enable_sort_and_agg=True, store=True),
        FieldSchema("t", FieldType.TEXT, index=True, store=True, analyzer=AnalyzerType.SINGLEWORD),
        FieldSchema("g", FieldType.GEOPOINT, index=True, store=True),
        FieldSchema("ka", FieldType.KEYWORD, index=True, is_array=True, store=True),
        FieldSchema("la", FieldType.LONG, index=True, is_array=True, store=True),
        FieldSchema("l", FieldType.LONG, index=True, store=True),
        FieldSchema("d", FieldType.DOUBLE, index=True, store=True),
        FieldSchema("time", FieldType.DATE, index=True, store=True, date_formats=["yyyy-MM-dd"]),
        FieldSchema("stamp", FieldType.DATE, index=True, store=True,
                    date_formats=["yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "epoch_second"]),
        FieldSchema("vector", FieldType.VECTOR, vector_options=VectorOptions(
            data_type=VectorDataType.VD_FLOAT_32, metric_type=VectorMetricType.VM_COSINE, dimension=4)),
        FieldSchema("name", FieldType.TEXT, index=True, store=True, analyzer=AnalyzerType.FUZZY,
                    analyzer_parameter=FuzzyAnalyzerParameter()),
        FieldSchema("title", FieldType.TEXT, index=True, analyzer=AnalyzerType.MAXWORD),
        FieldSchema("brief", FieldType.TEXT, index=True, analyzer=AnalyzerType.MINWORD),
        FieldSchema("n", FieldType.NESTED, sub_field_schemas=[
            FieldSchema("nk", FieldType.KEYWORD, index=True, store=True),
            FieldSchema("nl", FieldType.LONG, index=True, store=True),
            FieldSchema("nt", FieldType.TEXT, index=True, store=True),
        ]),
    ]


def columns(i: int) -> list[tuple[str, Any]]:
    return [
        ("k", f"key{i:03d}"), ("t", f"this is {i}"),
        ("g", f"{30.0 + 0.05 * (i // 100):f},{114.0 + 0.05 * (i % 100):f}"),
        ("ka", f'["a", "b", "{i}"]'), ("la", f"[-1, {i}]"), ("l", i), ("d", 0.1),
        ("time", f"2022-05-{i % 31 + 1}"),
        ("stamp", "2022-05-01T08:00:00.000+08:00" if i % 2 else str(1_651_363_201 + i)),
        ("n", json.dumps([{"nk": f"key{i:03d}", "nl": i, "nt": f"this is in nested {i}"}])),
        ("vector", f"[{i + 1}, {i - 1}, {i + 5}, {i - 5}]"),
        ("name", NAMES[i // 100] + NAMES[i % 10]),
        ("title", TITLES[i % len(TITLES)]),
        ("brief", TITLES[i % len(TITLES)]),
    ]


@pytest.fixture(scope="module")
def client(local_ots: LocalTablestore) -> OTSClient:
    client = local_ots.fresh_instance("fields").client()
    client.create_table(TableMeta("t", [("PK1", "INTEGER"), ("PK2", "STRING")]), TableOptions(),
                        ReservedThroughput(CapacityUnit(0, 0)))
    client.create_search_index("t", "idx", SearchIndexMeta(index_fields()))
    for start in range(0, ROWS, 200):
        request = BatchWriteRowRequest()
        request.add(TableInBatchWriteRowItem("t", [
            PutRowItem(Row([("PK1", i), ("PK2", f"pk_{i % 10}")], columns(i)), Condition("IGNORE"))
            for i in range(start, start + 200)]))
        assert client.batch_write_row(request).is_all_succeed()
    return client


def total(client: OTSClient, query: Any, index: str = "idx") -> int:
    response = client.search("t", index, SearchQuery(query, limit=100, get_total_count=True), ALL)
    assert response.is_all_succeed
    return response.total_count  # type: ignore[no-any-return]


def test_strings_for_numeric_fields_are_converted(client: OTSClient) -> None:
    assert total(client, TermQuery("l", "900")) == 1
    assert total(client, TermQuery("la", "900")) == 1
    assert total(client, RangeQuery("la", "100", "300", include_lower=True, include_upper=True)) == 201
    assert total(client, TermsQuery("l", ["0", 999, "1000"])) == 2
    assert total(client, TermQuery("d", "0.1")) == ROWS
    with pytest.raises(OTSServiceError) as info:
        total(client, TermQuery("l", "nine hundred"))
    assert info.value.code == "OTSParameterInvalid"


def test_date_fields_parse_their_formats_strictly(client: OTSClient) -> None:
    # yyyy-MM-dd takes two-digit days only: 2022-05-6 is not a date, 2022-05-10 is.
    assert total(client, RangeQuery("time", "2022-05-06", "2022-05-12", include_lower=True,
                                    include_upper=True)) == 96
    assert total(client, TermQuery("time", "2022-05-10")) == 32
    # Several formats: the first that reads the value wins; an offset moves the instant.
    assert total(client, TermQuery("stamp", "2022-05-01T00:00:00.000+00:00")) == ROWS // 2
    assert total(client, RangeQuery("stamp", 1_651_363_200_000, 1_651_363_200_010 * 1000)) == ROWS


def test_percentiles_of_dates(client: OTSClient) -> None:
    query = SearchQuery(TermQuery("d", 0.1), limit=0, aggs=[Percentiles("time", [90, 50])])
    items = client.search("t", "idx", query, ALL).agg_results[0].value
    days = [(i.key, int(i.value // 86_400_000 - 19_113 + 1)) for i in items]  # 19113: 2022-05-01
    assert days == [(50, 20), (90, 29)]


def test_geo_queries(client: OTSClient) -> None:
    """The SDK test's figures: points on a 10 x 100 grid from (30, 114) in 0.05 degree steps."""
    assert total(client, GeoDistanceQuery("g", "32.5,116.5", 300000)) == 668
    # 30.2 lies on the box's edge; stored quantized, it falls just outside, as on the service.
    assert total(client, GeoBoundingBoxQuery("g", "30.9,112.0", "30.2,119.0")) == 500
    polygon = ["30.9,112.0", "30.5,115.0", "30.3, 117.0", "30.2,119.0"]
    assert total(client, GeoPolygonQuery("g", polygon)) == 90
    with pytest.raises(OTSServiceError):
        total(client, GeoDistanceQuery("k", "32.5,116.5", 1000))


def test_nested_queries(client: OTSClient) -> None:
    assert total(client, NestedQuery("n", TermQuery("n.nk", "key199"))) == 1
    assert total(client, NestedQuery("n", RangeQuery("n.nl", 100, 300, include_lower=True,
                                                    include_upper=True))) == 201
    both = BoolQuery(must_queries=[TermQuery("n.nk", "key005"), MatchQuery("n.nt", "nested")])
    assert total(client, NestedQuery("n", both)) == 1
    with pytest.raises(OTSServiceError):
        total(client, NestedQuery("k", TermQuery("k", "key001")))


def test_an_index_with_nested_fields_pages_by_token_only_with_a_sort(client: OTSClient) -> None:
    """It has no presort, so the service returns no next_token for a query without a sort, even
    with more rows to come (documented); with a sort, tokens page as usual."""
    unsorted = client.search("t", "idx", SearchQuery(MatchAllQuery(), limit=100, get_total_count=True), ALL)
    assert (len(unsorted.rows), unsorted.total_count, unsorted.next_token) == (100, ROWS, b"")
    by_pk = SearchQuery(MatchAllQuery(), limit=100, sort=Sort([PrimaryKeySort()]))
    assert client.search("t", "idx", by_pk, ALL).next_token


def test_knn_vector_query_exact(client: OTSClient) -> None:
    knn = KnnVectorQuery(field_name="vector", top_k=10, float32_query_vector=[1, -1, 5, -5])
    by_score = Sort(sorters=[ScoreSort(sort_order=SortOrder.DESC)])
    response = client.search("t", "idx", SearchQuery(knn, limit=100, sort=by_score),
                             ColumnsToGet(return_type=ColumnReturnType.ALL_FROM_INDEX))
    assert len(response.rows) == 100  # a top_k below the limit is raised to it, as on the service
    # A full page carries a token (the service's partitions each return top_k); here the next
    # page is empty and ends the query.
    following = SearchQuery(knn, limit=100, sort=by_score, next_token=response.next_token)
    more = client.search("t", "idx", following, ColumnsToGet(return_type=ColumnReturnType.ALL_FROM_INDEX))
    assert response.next_token and (more.rows, more.next_token) == ([], b"")
    assert response.rows[0][0] == [("PK1", 0), ("PK2", "pk_0")]  # the same vector: cosine 1
    scores = [hit.score for hit in response.search_hits]
    assert scores[0] == pytest.approx(1.0) and scores == sorted(scores, reverse=True)
    few = client.search("t", "idx", SearchQuery(KnnVectorQuery("vector", 3, [1, -1, 5, -5],
                                                               filter=TermQuery("d", 0.1)), limit=3), ALL)
    assert [pk[0][1] for pk, _ in few.rows] == [0, 1, 2]
    for bad in (KnnVectorQuery("vector", 10, [1, 2]), KnnVectorQuery("l", 10, [1, 2, 3, 4]),
                BoolQuery(must_queries=[KnnVectorQuery("vector", 10, [1, -1, 5, -5])])):
        with pytest.raises(OTSServiceError) as info:
            client.search("t", "idx", SearchQuery(bad), ALL)
        assert info.value.code == "OTSParameterInvalid"


def test_fuzzy_analyzer_finds_substrings(client: OTSClient) -> None:
    """As the SDK test: names are two of 马尔代夫巴厘岛苏梅岛; 苏 is in 100 + 100 - 10 of them."""
    assert total(client, MatchPhraseQuery("name", "苏")) == 190
    assert total(client, MatchPhraseQuery("name", "苏梅")) == 10
    assert total(client, MatchQuery("name", "巴厘")) == 10  # 巴 first (rows 400-499), 厘 second
    assert total(client, MatchQuery("name", "巴")) == 190


@pytest.mark.slow
def test_dictionary_analyzers_segment_words(client: OTSClient) -> None:
    per_title = ROWS // len(TITLES)
    # max_word: 菊花茶 is 菊花, 花茶 and 菊花茶; any of them matches (OR).
    matching = ["菊花茶", "我爱喝花茶", "菊花开了", "一杯菊花茶和一杯红茶", "花茶的做法"]
    assert total(client, MatchQuery("title", "菊花茶")) == len(matching) * per_title
    assert total(client, MatchQuery("title", "菊花茶", operator=QueryOperator.AND)) == 2 * per_title
    assert total(client, MatchPhraseQuery("title", "菊花茶")) == 2 * per_title
    assert total(client, TermQuery("title", "花茶")) == 4 * per_title
    # min_word keeps 菊花茶 whole: 菊花 alone is another word.
    assert total(client, MatchQuery("brief", "菊花")) == per_title
    assert total(client, MatchQuery("brief", "红茶")) == 2 * per_title


def test_single_word_splits_chinese_into_characters(ots_client: OTSClient) -> None:
    ots_client.create_table(TableMeta("cn", [("id", "INTEGER")]), TableOptions(),
                            ReservedThroughput(CapacityUnit(0, 0)))
    text = FieldSchema("t", FieldType.TEXT, index=True, analyzer=AnalyzerType.SINGLEWORD)
    ots_client.create_search_index("cn", "idx", SearchIndexMeta([text]))
    for i, value in enumerate(["巴厘岛 Beach", "马尔代夫", "岛屿"]):
        ots_client.put_row("cn", Row([("id", i)], [("t", value)]))

    def count(query: Any) -> int:
        return ots_client.search("cn", "idx", SearchQuery(query, get_total_count=True), ALL).total_count

    assert count(TermQuery("t", "岛")) == 2
    assert count(MatchPhraseQuery("t", "厘岛")) == 1
    assert count(MatchQuery("t", "beach")) == 1


PAGES = [("http://a.com/001.html", "forum", "求推荐几款菊花茶店铺", 25),
         ("http://b.com/news/001.html", "news", "秋天最适合饮用的几种花茶", 30),
         ("http://a.com/011.html", "forum", "苕溪边上有一大片野生菊花", 100),
         ("http://a.com/019.html", "forum", "菊花茶是一款大部分人都适合的经典花茶。Fresh tea, hot tea!", 120)]


@pytest.fixture
def pages(ots_client: OTSClient) -> OTSClient:
    """The SDK's full_text_search_test data: titles segmented by max_word."""
    ots_client.create_table(TableMeta("web", [("url", "STRING")]), TableOptions(),
                            ReservedThroughput(CapacityUnit(0, 0)))
    ots_client.create_search_index("web", "idx", SearchIndexMeta([
        FieldSchema("url", FieldType.KEYWORD, index=True, enable_sort_and_agg=True),
        FieldSchema("title", FieldType.TEXT, index=True, analyzer=AnalyzerType.MAXWORD,
                    enable_highlighting=True),
        FieldSchema("type", FieldType.KEYWORD, index=True, enable_sort_and_agg=True),
        FieldSchema("pv", FieldType.LONG, index=True, enable_sort_and_agg=True),
        FieldSchema("author", FieldType.TEXT, index=True),
    ]))
    for url, kind, title, pv in PAGES:
        ots_client.put_row("web", Row([("url", url)], [("type", kind), ("title", title), ("pv", pv)]))
    return ots_client


def test_max_word_matches_as_the_sdk_test_expects(pages: OTSClient) -> None:
    def count(query: Any) -> int:
        return pages.search("web", "idx", SearchQuery(query, get_total_count=True), ALL).total_count

    assert count(MatchQuery("title", "菊花茶")) == 4
    assert count(MatchQuery("title", "梨花茶")) == 3
    assert count(MatchQuery("title", "花茶")) == 3
    assert count(MatchQuery("title", "菊花")) == 3
    assert count(MatchQuery("title", "饮用花茶", operator=QueryOperator.AND)) == 1
    assert count(MatchQuery("title", "饮用花茶", operator=QueryOperator.OR)) == 3
    assert count(MatchQuery("title", "饮用花茶", operator=QueryOperator.OR, minimum_should_match=2)) == 1
    assert count(MatchPhraseQuery("title", "野生菊花")) == 1
    assert count(MatchPhraseQuery("title", "秋天菊花")) == 0


def test_highlighting(pages: OTSClient) -> None:
    param = HighlightParameter("title", 1, 18, "<b>", "</b>", HighlightFragmentOrder.TEXT_SEQUENCE)
    query = SearchQuery(FunctionScoreQuery(MatchQuery("title", "花茶"), FieldValueFactor("pv")),
                        sort=Sort([PrimaryKeySort()]),
                        highlight=Highlight([param], HighlightEncoder.PLAIN_MODE))
    response = pages.search("web", "idx", query, ColumnsToGet(["title"], ColumnReturnType.SPECIFIED))
    fragments = [[(f.field_name, f.field_fragments) for f in hit.highlight_result.highlight_fields]
                 for hit in response.search_hits]
    assert fragments == [  # by url: a.com/001, a.com/019, b.com/news/001
        [("title", ["求推荐几款菊<b>花茶</b>店铺"])],
        [("title", ["菊<b>花茶</b>是一款大部分人都适合的经典<b>花茶</b>。"])],  # a sentence is not cut
        [("title", ["秋天最适合饮用的几种<b>花茶</b>"])],
    ]
    tea = HighlightParameter("title", 5, 10, fragments_order=HighlightFragmentOrder.TEXT_SEQUENCE)
    words = SearchQuery(MatchQuery("title", "tea"), highlight=Highlight([tea], HighlightEncoder.HTML_MODE))
    hit = pages.search("web", "idx", words, ALL).search_hits[0]
    expected = ["Fresh <em>tea</em>, hot <em>tea</em>!"]
    assert hit.highlight_result.highlight_fields[0].field_fragments == expected
    plain = pages.search("web", "idx", SearchQuery(MatchQuery("title", "花茶"), get_total_count=True), ALL)
    assert [len(h.highlight_result.highlight_fields) for h in plain.search_hits] == [0, 0, 0]
    refused = Highlight([HighlightParameter("author", 1, 18, "<b>", "</b>")], HighlightEncoder.PLAIN_MODE)
    with pytest.raises(OTSServiceError) as info:
        pages.search("web", "idx", SearchQuery(MatchQuery("author", "wang"), highlight=refused), ALL)
    assert (info.value.code, info.value.message) == (
        "OTSParameterInvalid", "highlighting is not supported for field[author]")


def test_what_is_out_of_scope_is_refused(pages: OTSClient) -> None:
    """The README's out-of-scope list: refused with a clear error, never silently ignored."""
    for query in (SearchQuery(MatchAllQuery(), collapse_field=Collapse("type")),
                  SearchQuery(MatchAllQuery(),
                              group_bys=[GroupByGeoGrid("g", GeoHashPrecision.GHP_5009KM_4992KM_1)]),
                  SearchQuery(MatchAllQuery(), group_bys=[GroupByComposite([GroupByField("type")])])):
        with pytest.raises(OTSServiceError) as info:
            pages.search("web", "idx", query, ALL)
        assert info.value.code == "OTSParameterInvalid" and "not supported" in info.value.message
