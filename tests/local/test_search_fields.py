"""Field semantics of Search through the server and the official SDK, on the data set of the
SDK's search_index_test.py: values given as strings for numeric fields, DATE fields with their
date_formats, geo queries, nested queries, analyzers and KNN vectors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tablestore import (
    BatchWriteRowRequest,
    CapacityUnit,
    ColumnReturnType,
    ColumnsToGet,
    Condition,
    FieldSchema,
    FieldType,
    OTSClient,
    OTSServiceError,
    Percentiles,
    PutRowItem,
    RangeQuery,
    ReservedThroughput,
    Row,
    SearchIndexMeta,
    SearchQuery,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
    TermQuery,
    TermsQuery,
)
from tablestore.metadata import AnalyzerType

from tsmigrate.local.testing import LocalTablestore

ROWS = 1000
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
    ]


def columns(i: int) -> list[tuple[str, Any]]:
    return [
        ("k", f"key{i:03d}"), ("t", f"this is {i}"),
        ("g", f"{30.0 + 0.05 * (i // 100):f},{114.0 + 0.05 * (i % 100):f}"),
        ("ka", f'["a", "b", "{i}"]'), ("la", f"[-1, {i}]"), ("l", i), ("d", 0.1),
        ("time", f"2022-05-{i % 31 + 1}"),
        ("stamp", "2022-05-01T08:00:00.000+08:00" if i % 2 else str(1_651_363_201 + i)),
        ("n", json.dumps([{"nk": f"key{i:03d}", "nl": i, "nt": f"this is in nested {i}"}])),
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
