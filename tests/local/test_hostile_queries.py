"""Hostile queries cannot stall, exhaust or crash the local server (issue 23, items 1 and 3).

Through the official SDK against the local server:
- a catastrophic-backtracking regex condition and a many-star wildcard query answer at once with
  the right result, and another client's ListTable is not held up meanwhile;
- a wildcard longer than the service's 32 characters is refused as on the service;
- a search that outlives its time budget (the service's 10 s Search timeout) answers 503 OTSTimeout;
- a query tree deeper or larger than the limits is a 400 OTSParameterInvalid naming the limit,
  refused before it is parsed (server memory stays near the request's size) and logged as one
  line, not a traceback.
"""

from __future__ import annotations

import logging
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
import rawhttp
from tablestore import (
    BoolQuery,
    CapacityUnit,
    CastType,
    ColumnReturnType,
    ColumnsToGet,
    ComparatorType,
    FieldSchema,
    FieldType,
    MatchAllQuery,
    OTSClient,
    OTSServiceError,
    RegexRule,
    ReservedThroughput,
    Row,
    SearchIndexMeta,
    SearchQuery,
    SingleColumnRegexCondition,
    TableMeta,
    TableOptions,
    TermQuery,
    WildcardQuery,
)
from tablestore.protobuf import search_pb2 as spb
from tablestore.retry import NoRetryPolicy

from tsmigrate.local import search
from tsmigrate.local.search_limits import MAX_QUERY_COUNT, MAX_QUERY_DEPTH
from tsmigrate.local.testing import LocalTablestore

CU0 = ReservedThroughput(CapacityUnit(0, 0))
# Catastrophic for a backtracking engine: 2^31 ways to split the a's before `$` fails on "!".
EVIL_REGEX = "(a+)+$"
EVIL_VALUE = "a" * 30 + "!"
# 30 characters; a regex translation backtracks through all 15 stars on 40 a's.
EVIL_WILDCARD = "*a" * 14 + "*c"
ANSWER_S = 5.0  # far above what a linear matcher needs, far below a backtracking one
OTHER_CLIENT_S = 1.0


def error_of(call: Callable[..., Any], *args: Any, **kwargs: Any) -> OTSServiceError:
    with pytest.raises(OTSServiceError) as info:
        call(*args, **kwargs)
    return info.value


def quick_client(ots_instance: LocalTablestore) -> OTSClient:
    # No retries and a short socket timeout: a stalled server fails the test instead of hanging.
    return ots_instance.client(socket_timeout=ANSWER_S * 2, retry_policy=NoRetryPolicy())


def answered_while_others_served(ots_instance: LocalTablestore, call: Callable[[], Any]) -> Any:
    """Run `call` in a thread while a second client lists tables: the call must answer within
    ANSWER_S, the listing within OTHER_CLIENT_S. Returns the call's result."""
    result: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        started.set()
        try:
            result["value"] = call()
        except Exception as e:  # reported below, in the test's thread
            result["error"] = e

    worker = threading.Thread(target=run, daemon=True)
    t0 = time.monotonic()
    worker.start()
    assert started.wait(ANSWER_S)
    other = quick_client(ots_instance)
    t1 = time.monotonic()
    other.list_table()
    listed = time.monotonic() - t1
    worker.join(ANSWER_S)
    assert not worker.is_alive(), f"the hostile request did not answer within {ANSWER_S} s"
    assert listed < OTHER_CLIENT_S, f"ListTable took {listed:.2f} s while the hostile request ran"
    assert time.monotonic() - t0 < ANSWER_S
    if "error" in result:
        raise result["error"]
    return result["value"]


# --- item 1: regex conditions and wildcard queries match in linear time ------------------------


def test_backtracking_regex_condition_answers_at_once(ots_instance: LocalTablestore) -> None:
    client = quick_client(ots_instance)
    client.create_table(TableMeta("t", [("id", "STRING")]), TableOptions(), CU0)
    client.put_row("t", Row([("id", "evil")], [("c", EVIL_VALUE)]))
    client.put_row("t", Row([("id", "good")], [("c", "a" * 31)]))
    # The first group of "(a+)+$" is the whole run of a's that ends the value.
    cond = SingleColumnRegexCondition("c", ComparatorType.EQUAL, "a" * 31,
                                      RegexRule(EVIL_REGEX, CastType.VT_STRING))

    def both() -> tuple[Any, Any]:
        _, evil, _ = client.get_row("t", [("id", "evil")], max_version=1, column_filter=cond)
        _, good, _ = client.get_row("t", [("id", "good")], max_version=1, column_filter=cond)
        return evil, good

    evil, good = answered_while_others_served(ots_instance, both)
    assert evil is None  # no match: the row is filtered out
    assert good is not None and good.attribute_columns[0][:2] == ("c", "a" * 31)


def test_regex_the_linear_engine_cannot_run_is_an_invalid_regex(ots_client: OTSClient) -> None:
    ots_client.create_table(TableMeta("t", [("id", "STRING")]), TableOptions(), CU0)
    ots_client.put_row("t", Row([("id", "x")], [("c", "aa")]))
    cond = SingleColumnRegexCondition("c", ComparatorType.EQUAL, "a",
                                      RegexRule(r"(a)\1", CastType.VT_STRING))  # a backreference
    e = error_of(ots_client.get_row, "t", [("id", "x")], max_version=1, column_filter=cond)
    assert (e.get_http_status(), e.get_error_code()) == (400, "OTSParameterInvalid")
    assert e.get_error_message().startswith(r"Invalid regex: (a)\1, ")


def search_table(client: OTSClient) -> None:
    client.create_table(TableMeta("t", [("id", "STRING")]), TableOptions(), CU0)
    client.create_search_index("t", "idx", SearchIndexMeta([
        FieldSchema("k", FieldType.KEYWORD, index=True),
    ]))
    client.put_row("t", Row([("id", "a40")], [("k", "a" * 40)]))
    client.put_row("t", Row([("id", "a39c")], [("k", "a" * 39 + "c")]))
    client.put_row("t", Row([("id", "other")], [("k", "bc")]))


def ids(response: Any) -> list[str]:
    return sorted(row[0][0][1] for row in response.rows)


def test_many_star_wildcard_answers_at_once(ots_instance: LocalTablestore) -> None:
    client = quick_client(ots_instance)
    search_table(client)
    query = SearchQuery(WildcardQuery("k", EVIL_WILDCARD), limit=100)
    response = answered_while_others_served(
        ots_instance, lambda: client.search("t", "idx", query, ColumnsToGet(
            return_type=ColumnReturnType.NONE)))
    assert ids(response) == ["a39c"]
    # `?` and `*` keep their meaning.
    response = client.search("t", "idx", SearchQuery(WildcardQuery("k", "?c"), limit=100))
    assert ids(response) == ["other"]


def test_wildcard_longer_than_the_service_allows_is_refused(ots_client: OTSClient) -> None:
    search_table(ots_client)
    e = error_of(ots_client.search, "t", "idx", SearchQuery(WildcardQuery("k", "*a" * 16 + "*")))
    assert (e.get_http_status(), e.get_error_code()) == (400, "OTSParameterInvalid")
    assert "limit: 32" in e.get_error_message()


# --- item 3: nesting depth and clause count ----------------------------------------------------


def nested_bool(depth: int) -> Any:
    """`depth` queries, each BoolQuery holding the next; a TermQuery innermost."""
    query: Any = TermQuery("k", "bc")
    for _ in range(depth - 1):
        query = BoolQuery(must_queries=[query])
    return query


def test_nesting_up_to_the_limit_is_served(ots_client: OTSClient) -> None:
    search_table(ots_client)
    response = ots_client.search("t", "idx", SearchQuery(nested_bool(MAX_QUERY_DEPTH)))
    assert ids(response) == ["other"]


def test_nesting_beyond_the_limit_is_refused_naming_it(ots_client: OTSClient) -> None:
    search_table(ots_client)
    e = error_of(ots_client.search, "t", "idx", SearchQuery(nested_bool(MAX_QUERY_DEPTH + 1)))
    assert (e.get_http_status(), e.get_error_code()) == (400, "OTSParameterInvalid")
    assert e.get_error_message() == \
        f"The depth of nested queries exceeds the limit: {MAX_QUERY_DEPTH}."


def test_too_many_clauses_are_refused_naming_the_limit(ots_client: OTSClient) -> None:
    search_table(ots_client)
    wide = BoolQuery(should_queries=[MatchAllQuery()] * MAX_QUERY_COUNT)  # + itself: one over
    e = error_of(ots_client.search, "t", "idx", SearchQuery(wide))
    assert (e.get_http_status(), e.get_error_code()) == (400, "OTSParameterInvalid")
    assert e.get_error_message() == f"The number of queries exceeds the limit: {MAX_QUERY_COUNT}."
    fits = BoolQuery(should_queries=[MatchAllQuery()] * (MAX_QUERY_COUNT - 1))
    assert ids(ots_client.search("t", "idx", SearchQuery(fits, limit=100))) == \
        ["a39c", "a40", "other"]


def deep_request(depth: int, padding: int) -> spb.SearchRequest:
    """A SearchRequest nesting `depth` BoolQuerys around a TermQuery of `padding` bytes, built
    inside out as bytes (the SDK's encoder recurses once per level, so it cannot build this)."""
    inner = spb.Query(type=spb.TERM_QUERY, query=spb.TermQuery(
        field_name="k", term=b"\x00" * padding).SerializeToString()).SerializeToString()
    for _ in range(depth - 1):
        bool_query = spb.BoolQuery()
        bool_query.must_queries.add().MergeFromString(inner)
        inner = spb.Query(type=spb.BOOL_QUERY, query=bool_query.SerializeToString()).SerializeToString()
    search_query = spb.SearchQuery()
    search_query.query.MergeFromString(inner)
    return spb.SearchRequest(table_name="t", index_name="idx",
                             search_query=search_query.SerializeToString())


def test_very_deep_query_is_refused_in_bounded_memory_with_one_log_line(
        ots_client: OTSClient, caplog: pytest.LogCaptureFixture) -> None:
    search_table(ots_client)
    padding = 200_000
    request = deep_request(2000, padding)
    size = len(request.SerializeToString())
    caplog.set_level(logging.INFO)
    caplog.clear()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        e = error_of(rawhttp.call, ots_client, "Search", request, spb.SearchResponse)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (e.get_http_status(), e.get_error_code()) == (400, "OTSParameterInvalid")
    assert e.get_error_message() == \
        f"The depth of nested queries exceeds the limit: {MAX_QUERY_DEPTH}."
    # Loose: a few copies of the request (client and server side), not one per level.
    assert peak < 10 * size, f"peak {peak} bytes for a request of {size}"
    ours = [r for r in caplog.records if r.name.startswith("tsmigrate")]
    assert len(ours) == 1, [r.getMessage() for r in ours]
    assert ours[0].exc_info is None and "\n" not in ours[0].getMessage()
    assert str(MAX_QUERY_DEPTH) in ours[0].getMessage()
    assert "Traceback" not in caplog.text


def test_search_that_outlives_its_budget_answers_the_services_timeout(
        ots_instance: LocalTablestore, monkeypatch: pytest.MonkeyPatch) -> None:
    client = quick_client(ots_instance)  # OTSTimeout is retryable: no retries here
    search_table(client)
    # A budget already spent: the first document evaluated is over it.
    monkeypatch.setattr(search, "SEARCH_TIMEOUT_S", -1.0)
    e = error_of(client.search, "t", "idx", SearchQuery(WildcardQuery("k", EVIL_WILDCARD)))
    assert (e.get_http_status(), e.get_error_code(), e.get_error_message()) == \
        (503, "OTSTimeout", "Operation timeout.")
    monkeypatch.undo()
    assert ids(client.search("t", "idx", SearchQuery(WildcardQuery("k", EVIL_WILDCARD)))) == ["a39c"]


def test_search_matches_outside_the_storage_lock(
        ots_instance: LocalTablestore, monkeypatch: pytest.MonkeyPatch) -> None:
    client = quick_client(ots_instance)
    search_table(client)
    entered, release = threading.Event(), threading.Event()
    real = search.wildcard_match

    def held(pattern: str, text: str) -> bool:  # a query that is slow to match
        entered.set()
        release.wait(ANSWER_S)
        return real(pattern, text)

    monkeypatch.setattr(search, "wildcard_match", held)
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.setdefault("r", client.search(
        "t", "idx", SearchQuery(WildcardQuery("k", "*c"), limit=100))), daemon=True)
    worker.start()
    try:
        assert entered.wait(ANSWER_S), "the search never reached its matching"
        t0 = time.monotonic()
        quick_client(ots_instance).list_table()  # needs the storage lock
        listed = time.monotonic() - t0
    finally:
        release.set()
        worker.join(ANSWER_S)
    assert listed < OTHER_CLIENT_S, f"ListTable waited {listed:.2f} s for a search's matching"
    assert ids(result["r"]) == ["a39c", "other"]
