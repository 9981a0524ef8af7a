"""Relevance scores of Search through the server and the official SDK: BM25 for term, match and
match-phrase queries, bool sums, constant and function scores, weights, dis max, nested score
modes, and ScoreSort ordering by them. The full-text data set and its figures are those of the
SDK's own full_text_search_test.py, written against the service."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tablestore import (
    BoolQuery,
    CapacityUnit,
    ColumnReturnType,
    ColumnsToGet,
    DisMaxQuery,
    FieldSchema,
    FieldType,
    FieldValueFactor,
    FunctionScoreQuery,
    MatchAllQuery,
    MatchPhraseQuery,
    MatchQuery,
    NestedQuery,
    OTSClient,
    OTSServiceError,
    PrimaryKeySort,
    RangeQuery,
    ReservedThroughput,
    Row,
    ScoreMode,
    ScoreSort,
    SearchIndexMeta,
    SearchQuery,
    Sort,
    SortOrder,
    TableMeta,
    TableOptions,
    TermQuery,
)
from tablestore.metadata import AnalyzerType
from tablestore.protobuf import search_pb2 as spb

from tsmigrate.local.search import run_search
from tsmigrate.local.search_schema import validate_create
from tsmigrate.local.search_scoring import stored_length
from tsmigrate.local.testing import LocalTablestore

PAGES = [  # url, type, title, pv: the SDK test's rows
    ("http://a.com/001.html", "forum", "求推荐几款菊花茶店铺", 25),
    ("http://b.com/news/001.html", "news", "秋天最适合饮用的几种花茶", 30),
    ("http://a.com/011.html", "forum", "苕溪边上有一大片野生菊花", 100),
    ("http://a.com/019.html", "forum", "菊花茶是一款大部分人都适合的经典花茶", 120),
]
NOTES = [  # id, English text, tag, nested objects
    ("n1", "the quick brown fox", "rare", [{"w": "fox", "c": 1}]),
    ("n2", "the lazy dog sleeps", "common", [{"w": "dog", "c": 2}, {"w": "fox", "c": 3}]),
    ("n3", "fox fox fox", "common", [{"w": "cat", "c": 4}]),
    ("n4", "a brown dog and a quick brown fox jumped over the lazy dog", "common", []),
]
BY_SCORE = Sort([ScoreSort(SortOrder.DESC)])


@pytest.fixture(scope="module")
def client(local_ots: LocalTablestore) -> OTSClient:
    client = local_ots.fresh_instance("scores").client()
    for table, key in (("pages", "url"), ("notes", "id")):
        client.create_table(TableMeta(table, [(key, "STRING")]), TableOptions(),
                            ReservedThroughput(CapacityUnit(0, 0)))
    client.create_search_index("pages", "idx", SearchIndexMeta([
        FieldSchema("type", FieldType.KEYWORD, index=True, enable_sort_and_agg=True),
        FieldSchema("title", FieldType.TEXT, index=True, analyzer=AnalyzerType.MAXWORD),
        FieldSchema("pv", FieldType.LONG, index=True, enable_sort_and_agg=True),
    ]))
    client.create_search_index("notes", "idx", SearchIndexMeta([
        FieldSchema("text", FieldType.TEXT, index=True),
        FieldSchema("tag", FieldType.KEYWORD, index=True),
        FieldSchema("objs", FieldType.NESTED, sub_field_schemas=[
            FieldSchema("w", FieldType.KEYWORD, index=True),
            FieldSchema("c", FieldType.LONG, index=True),
        ]),
    ]))
    for url, kind, title, pv in PAGES:
        client.put_row("pages", Row([("url", url)], [("type", kind), ("title", title), ("pv", pv)]))
    for key, text, tag, objs in NOTES:
        columns = [("text", text), ("tag", tag), ("objs", json.dumps(objs))]
        client.put_row("notes", Row([("id", key)], columns))
    return client


def hits(client: OTSClient, table: str, query: Any, sort: Sort | None = BY_SCORE) -> list[tuple[str, float]]:
    """(key, score) of every hit, in the order returned."""
    response = client.search(table, "idx", SearchQuery(query, limit=100, sort=sort),
                             ColumnsToGet(return_type=ColumnReturnType.NONE))
    keys = [pk[0][1] for pk, _ in response.rows]
    return list(zip(keys, [h.score for h in response.search_hits], strict=True))


def test_function_score_of_a_match_gives_the_services_figures(client: OTSClient) -> None:
    """The SDK test's assertion: BM25 of 花茶 times pv, ordered by ScoreSort: 53, 11, 9."""
    ranked = hits(client, "pages", FunctionScoreQuery(MatchQuery("title", "花茶"), FieldValueFactor("pv")))
    assert [(url, int(score)) for url, score in ranked] == [
        ("http://a.com/019.html", 53), ("http://b.com/news/001.html", 11), ("http://a.com/001.html", 9)]


def test_bm25_favours_more_occurrences_and_shorter_fields(client: OTSClient) -> None:
    ranked = hits(client, "notes", MatchQuery("text", "fox"))
    assert [key for key, _ in ranked] == ["n3", "n1", "n4"]  # three foxes; short; long
    scores = [score for _, score in ranked]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0
    ascending = hits(client, "notes", MatchQuery("text", "fox"), Sort([ScoreSort(SortOrder.ASC)]))
    assert ascending == list(reversed(ranked))


def test_rarer_terms_weigh_more(client: OTSClient) -> None:
    """idf: 'quick' is in two notes, 'lazy' in two, 'sleeps' in one; on a KEYWORD, 'rare' in one
    of four beats 'common' in three."""
    (sleeps, _), *_ = hits(client, "notes", MatchQuery("text", "sleeps lazy"))
    assert sleeps == "n2"  # holds both, and the rarer one
    rare = dict(hits(client, "notes", TermQuery("tag", "rare")))
    common = dict(hits(client, "notes", TermQuery("tag", "common")))
    assert set(common) == {"n2", "n3", "n4"} and rare["n1"] > common["n2"] > 0


def test_match_phrase_scores_its_occurrences(client: OTSClient) -> None:
    ranked = dict(hits(client, "notes", MatchPhraseQuery("text", "brown fox")))
    assert set(ranked) == {"n1", "n4"} and ranked["n1"] > ranked["n4"] > 0


def test_bool_sums_must_and_should_but_not_filters(client: OTSClient) -> None:
    fox = dict(hits(client, "notes", MatchQuery("text", "fox")))
    quick = dict(hits(client, "notes", MatchQuery("text", "quick")))
    both = dict(hits(client, "notes", BoolQuery(must_queries=[MatchQuery("text", "fox")],
                                               should_queries=[MatchQuery("text", "quick")])))
    assert both.keys() == fox.keys()
    for key, score in both.items():
        assert score == pytest.approx(fox[key] + quick.get(key, 0.0))
    filtered = hits(client, "notes", BoolQuery(filter_queries=[MatchQuery("text", "fox")],
                                               must_not_queries=[TermQuery("tag", "rare")]))
    assert sorted(filtered) == [("n3", 0.0), ("n4", 0.0)]


def test_constant_scores(client: OTSClient) -> None:
    assert {s for _, s in hits(client, "notes", MatchAllQuery())} == {1.0}
    assert {s for _, s in hits(client, "pages", RangeQuery("pv", 0, 1000))} == {1.0}


def test_weights_multiply_and_dis_max_takes_the_best(client: OTSClient) -> None:
    plain = dict(hits(client, "notes", MatchQuery("text", "dog")))
    doubled = dict(hits(client, "notes", MatchQuery("text", "dog", weight=2)))
    assert doubled == {k: pytest.approx(2 * v) for k, v in plain.items()}
    fox = dict(hits(client, "notes", MatchQuery("text", "fox")))
    best = dict(hits(client, "notes", DisMaxQuery([MatchQuery("text", "dog"), MatchQuery("text", "fox")],
                                                  tie_breaker=0.5)))
    for key, score in best.items():
        a, b = plain.get(key, 0.0), fox.get(key, 0.0)
        assert score == pytest.approx(max(a, b) + 0.5 * min(a, b))


def test_nested_score_modes(client: OTSClient) -> None:
    inner = TermQuery("objs.w", "fox")
    assert {s for _, s in hits(client, "notes", NestedQuery("objs", inner))} == {0.0}  # default: none
    by_mode = {mode: dict(hits(client, "notes", NestedQuery("objs", inner, score_mode=mode)))
               for mode in (ScoreMode.AVG, ScoreMode.MAX, ScoreMode.TOTAL)}
    assert set(by_mode[ScoreMode.AVG]) == {"n1", "n2"}
    assert by_mode[ScoreMode.AVG]["n1"] == pytest.approx(by_mode[ScoreMode.TOTAL]["n1"])
    assert by_mode[ScoreMode.AVG]["n1"] > 0
    # n2 has a dog (rare among the objects: it scores more) and a fox.
    either = BoolQuery(should_queries=[TermQuery("objs.w", "fox"), TermQuery("objs.w", "dog")])
    avg, best, total, least = (dict(hits(client, "notes", NestedQuery("objs", either, score_mode=mode)))["n2"]
                               for mode in (ScoreMode.AVG, ScoreMode.MAX, ScoreMode.TOTAL, ScoreMode.MIN))
    assert total == pytest.approx(best + least) and avg == pytest.approx(total / 2) and best > least > 0


def test_function_score_needs_a_numeric_field(client: OTSClient) -> None:
    with pytest.raises(OTSServiceError) as info:
        hits(client, "pages", FunctionScoreQuery(MatchQuery("title", "花茶"), FieldValueFactor("type")))
    assert info.value.code == "OTSParameterInvalid" and "type" in info.value.message


def test_without_score_sort_the_presort_orders(client: OTSClient) -> None:
    """Scores order hits only when a ScoreSort asks (documented); hits still carry them."""
    ranked = hits(client, "notes", MatchQuery("text", "fox"), sort=None)
    assert [k for k, _ in ranked] == ["n1", "n3", "n4"]  # primary key order
    assert all(score > 0 for _, score in ranked)
    paged = hits(client, "notes", MatchQuery("text", "fox"), Sort([PrimaryKeySort()]))
    assert paged == ranked


@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_stored_lengths_are_exact_below_24_and_never_grow(length: int) -> None:
    stored = stored_length(length)
    assert stored <= length
    assert stored == length if length < 24 else stored >= length * 0.87


def test_const_score_query_scores_every_match_one() -> None:
    """ConstScoreQuery (which the Python SDK cannot build) through the engine, in wire form."""
    schema = validate_create(
        "idx", spb.IndexSchema(field_schemas=[spb.FieldSchema(field_name="text", field_type=spb.TEXT)]),
        None, pk_names=("id",), table_ttl=-1, max_versions=1, allow_update=True)
    match = spb.Query(type=spb.MATCH_QUERY,
                      query=spb.MatchQuery(field_name="text", text="fox").SerializeToString())
    const = spb.Query(type=spb.CONST_SCORE_QUERY,
                      query=spb.ConstScoreQuery(filter=match).SerializeToString())
    docs = [([("id", key)], {"text": text}) for key, text, *_ in NOTES]
    for query, constant in ((match, False), (const, True)):
        request = spb.SearchRequest(table_name="notes", index_name="idx",
                                    search_query=spb.SearchQuery(query=query, limit=10).SerializeToString())
        scores = [hit.score for hit in run_search(schema, request, docs).search_hits]
        assert len(scores) == 3 and (set(scores) == {1.0}) is constant
