"""Search aggregations and group-bys through the server and the official SDK, on the data set of
the SDK's own integration tests (agg_test.py, group_by_test.py): 100 rows, with a LONG, a
DOUBLE, a BOOLEAN, a KEYWORD, a TEXT, a GEO_POINT, array fields and a NESTED field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tablestore import (
    Avg,
    CapacityUnit,
    ColumnReturnType,
    ColumnsToGet,
    Count,
    DistinctCount,
    FieldSchema,
    FieldType,
    GeoPoint,
    GroupByDateHistogram,
    GroupByField,
    GroupByFilter,
    GroupByGeoDistance,
    GroupByHistogram,
    GroupByRange,
    GroupKeySort,
    Max,
    Min,
    OTSClient,
    OTSServiceError,
    Percentiles,
    PrimaryKeySort,
    ReservedThroughput,
    Row,
    RowCountSort,
    SearchIndexMeta,
    SearchQuery,
    Sort,
    SortOrder,
    SubAggSort,
    Sum,
    TableMeta,
    TableOptions,
    TermQuery,
    TopRows,
)
from tablestore.group_by import DateTimeValue, FieldRange
from tablestore.metadata import AnalyzerType, DateTimeUnit

from tsmigrate.local.testing import LocalTablestore

NONE = ColumnsToGet(return_type=ColumnReturnType.NONE)


@pytest.fixture(scope="module")
def client(local_ots: LocalTablestore) -> OTSClient:
    instance = local_ots.fresh_instance("aggs")
    client = instance.client()
    client.create_table(TableMeta("t", [("PK1", "INTEGER"), ("PK2", "STRING")]), TableOptions(),
                        ReservedThroughput(CapacityUnit(0, 0)))
    fields = [
        FieldSchema("k", FieldType.KEYWORD, index=True, enable_sort_and_agg=True, store=True),
        FieldSchema("t", FieldType.TEXT, index=True, store=True, analyzer=AnalyzerType.SINGLEWORD),
        FieldSchema("g", FieldType.GEOPOINT, index=True, store=True),
        FieldSchema("ka", FieldType.KEYWORD, index=True, is_array=True, store=True),
        FieldSchema("la", FieldType.LONG, index=True, is_array=True, store=True),
        FieldSchema("l", FieldType.LONG, index=True, store=True),
        FieldSchema("l3", FieldType.LONG, index=True, store=True),
        FieldSchema("b", FieldType.BOOLEAN, index=True, store=True),
        FieldSchema("d", FieldType.DOUBLE, index=True, store=True),
        FieldSchema("ts", FieldType.DATE, index=True, store=True),
        FieldSchema("n", FieldType.NESTED, sub_field_schemas=[
            FieldSchema("nk", FieldType.KEYWORD, index=True, store=True),
            FieldSchema("nl", FieldType.LONG, index=True, store=True),
            FieldSchema("nt", FieldType.TEXT, index=True, store=True),
        ]),
    ]
    client.create_search_index("t", "idx", SearchIndexMeta(fields))
    for i in range(100):
        client.put_row("t", Row([("PK1", i), ("PK2", f"pk_{i % 10}")], [
            ("k", f"key{i:03d}"), ("t", f"this is {i}"), ("g", f"30.000000,{114.0 + 0.05 * i:f}"),
            ("ka", f'["a", "b", "{i}"]'), ("la", f"[-1, {i}]"), ("l", i), ("l3", i % 3),
            ("b", i % 2 == 0), ("d", 0.1), ("ts", 1_650_000_000_000 + i * 3_600_000),
            ("n", json.dumps([{"nk": f"key{i:03d}", "nl": i, "nt": f"nested {i}"}])),
        ]))
    return client


def search(client: OTSClient, **query: Any) -> Any:
    return client.search("t", "idx", SearchQuery(TermQuery("d", 0.1), limit=100, get_total_count=True,
                                                 **query), NONE)


def agg(client: OTSClient, aggregation: Any) -> Any:
    response = search(client, aggs=[aggregation])
    assert response.is_all_succeed and len(response.agg_results) == 1
    return response.agg_results[0].value


@pytest.mark.parametrize(("aggregation", "expected"), [
    (Max("l"), 99), (Max("d"), 0.1), (Max("n.nl"), 99), (Max("la"), 99),
    (Min("l"), 0), (Min("n.nl"), 0), (Min("la"), -1),
    (Sum("l"), 4950), (Sum("n.nl"), 4950), (Sum("la"), 4850),
    (Avg("l"), 49.5), (Avg("n.nl"), 49.5), (Avg("la"), 24.25),
    (Count("l"), 100), (Count("k"), 100), (Count("b"), 100), (Count("g"), 100), (Count("n.nl"), 100),
    (Count("n.nk"), 100), (Count("la"), 200), (Count("ka"), 300),
    (DistinctCount("l"), 100), (DistinctCount("d"), 1), (DistinctCount("b"), 2), (DistinctCount("g"), 100),
    (DistinctCount("n.nk"), 100), (DistinctCount("la"), 101), (DistinctCount("ka"), 102),
])
def test_aggregations_as_the_service_computes_them(client: OTSClient, aggregation: Any,
                                                    expected: Any) -> None:
    assert agg(client, aggregation) == pytest.approx(expected)


def test_sum_and_avg_of_doubles(client: OTSClient) -> None:
    assert agg(client, Sum("d")) == pytest.approx(10)
    assert agg(client, Avg("d")) == pytest.approx(0.1)


@pytest.mark.parametrize("aggregation", [
    *(kind(name) for kind in (Max, Min, Sum, Avg) for name in ("k", "t", "g", "ka", "b", "n.nk", "n.nt")),
    Count("t"), Count("n.nt"), DistinctCount("t"), DistinctCount("n.nt"),
    *(Percentiles(name, [99.9, 90]) for name in ("t", "k", "b", "g", "n.nt")),
    Max("nope"), TopRows(limit=10000, sort=Sort([PrimaryKeySort()])),
])
def test_aggregations_refuse_fields_of_the_wrong_type(client: OTSClient, aggregation: Any) -> None:
    with pytest.raises(OTSServiceError) as info:
        search(client, aggs=[aggregation])
    assert (info.value.http_status, info.value.code) == (400, "OTSParameterInvalid")


def test_top_rows_multiple_aggregations_and_missing_values(client: OTSClient) -> None:
    rows = agg(client, TopRows(limit=2, sort=Sort([PrimaryKeySort()])))
    assert rows == [([("PK1", 0), ("PK2", "pk_0")], []), ([("PK1", 1), ("PK2", "pk_1")], [])]
    response = search(client, aggs=[Sum("l", name="a1"), Avg("l", name="a2")])
    assert [(a.name, a.value) for a in response.agg_results] == [("a1", 4950), ("a2", 49.5)]
    with pytest.raises(OTSServiceError):
        search(client, aggs=[Sum("l", name="same"), Avg("l", name="same")])
    query = SearchQuery(TermQuery("l", 5), aggs=[Max("l3", 1000, name="m")])
    missing = client.search("t", "idx", query, NONE)
    assert missing.agg_results[0].value == 2  # the row has l3, so missing does not apply


def test_percentiles(client: OTSClient) -> None:
    items = agg(client, Percentiles("l", [90, 50]))
    assert [(i.key, i.value) for i in items] == [(50, 49), (90, 89)]
    items = agg(client, Percentiles("la", [90, 50]))
    assert [(i.key, i.value) for i in items] == [(50, 0), (90, 79)]
    items = agg(client, Percentiles("d", [50]))
    assert [(i.key, i.value) for i in items] == [(50, 0.1)]


def test_group_by_field(client: OTSClient) -> None:
    result = search(client, group_bys=[GroupByField("l3")]).group_by_results[0]
    assert [(i.key, i.row_count) for i in result.items] == [("0", 34), ("1", 33), ("2", 33)]
    by_count = GroupByField("l3", size=2, group_by_sort=[RowCountSort(sort_order=SortOrder.ASC)])
    result = search(client, group_bys=[by_count]).group_by_results[0]
    assert [(i.key, i.row_count) for i in result.items] == [("1", 33), ("2", 33)]
    top = [TopRows(limit=3, sort=Sort([PrimaryKeySort(sort_order=SortOrder.DESC)]), name="t1")]
    ascending = [RowCountSort(sort_order=SortOrder.ASC)]
    with_rows = GroupByField("l3", size=2, group_by_sort=ascending, sub_aggs=top)
    item = search(client, group_bys=[with_rows]).group_by_results[0].items[0]
    assert item.sub_aggs[0].name == "t1"
    assert [pk for pk, _ in item.sub_aggs[0].value] == [
        [("PK1", 97), ("PK2", "pk_7")], [("PK1", 94), ("PK2", "pk_4")], [("PK1", 91), ("PK2", "pk_1")]]
    by_key = GroupByField("b", group_by_sort=[GroupKeySort(sort_order=SortOrder.DESC)],
                          sub_aggs=[Sum("l", name="s")])
    items = search(client, group_bys=[by_key]).group_by_results[0].items
    assert [(i.key, i.row_count, i.sub_aggs[0].value) for i in items] == [
        ("true", 50, 2450), ("false", 50, 2500)]
    by_agg = GroupByField("l3", group_by_sort=[SubAggSort(sort_order=SortOrder.DESC, sub_agg_name="s")],
                          sub_aggs=[Sum("l", name="s")])
    items = search(client, group_bys=[by_agg]).group_by_results[0].items
    assert [i.key for i in items] == ["0", "2", "1"]  # sums 1683, 1617, 1650


def test_group_by_range_filter_and_geo_distance(client: OTSClient) -> None:
    ranges = GroupByRange("la", ranges=[(0, 10), (11, 25)])
    items = search(client, group_bys=[ranges]).group_by_results[0].items
    assert [(i.range_from, i.range_to, i.row_count) for i in items] == [(0, 10, 10), (11, 25, 14)]
    filters = GroupByFilter([TermQuery("l3", 1), TermQuery("ka", "a")])
    items = search(client, group_bys=[filters]).group_by_results[0].items
    assert [i.row_count for i in items] == [33, 100]
    geo = GroupByGeoDistance("g", origin=GeoPoint(31, 116), ranges=[(0, 300000), (300000, 1000000)])
    items = search(client, group_bys=[geo]).group_by_results[0].items
    assert [(i.range_from, i.range_to, i.row_count) for i in items] == [(0, 300000, 99), (300000, 1000000, 1)]


def test_group_by_histograms(client: OTSClient) -> None:
    histogram = GroupByHistogram("l", 25, FieldRange(0, 99), sub_aggs=[Max("l", name="top")])
    items = search(client, group_bys=[histogram]).group_by_results[0].items
    assert [(i.key, i.value, i.sub_aggs[0].value) for i in items] == [
        (0, 25, 24), (25, 25, 49), (50, 25, 74), (75, 25, 99)]
    hours = GroupByDateHistogram("ts", DateTimeValue(1, DateTimeUnit.HOUR), FieldRange(0, 2**62),
                                 min_doc_count=1)
    items = search(client, group_bys=[hours]).group_by_results[0].items
    assert len(items) == 100 and items[0].row_count == 1
    assert items[0].timestamp == 1_650_000_000_000 // 3_600_000 * 3_600_000  # the hour it falls in
    days = GroupByDateHistogram("ts", DateTimeValue(1, DateTimeUnit.DAY), FieldRange(0, 2**62),
                                time_zone="+08:00")
    items = search(client, group_bys=[days]).group_by_results[0].items
    assert sum(i.row_count for i in items) == 100
    assert all((i.timestamp + 8 * 3_600_000) % 86_400_000 == 0 for i in items)  # local midnights


def test_histogram_field_range_adds_no_empty_buckets(client: OTSClient) -> None:
    # The SDK's group_by_test.py::test_group_by_histogram: field_range bounds the buckets but does
    # not extend them, so every d = 0.1 falls in one bucket although [0, 3) spans two intervals.
    longs = GroupByHistogram("l3", 2, FieldRange(0, 3))
    items = search(client, group_bys=[longs]).group_by_results[0].items
    assert [(i.key, i.value) for i in items] == [(0, 67), (2, 33)]
    doubles = GroupByHistogram("d", 2.0, FieldRange(0.0, 3.0))
    items = search(client, group_bys=[doubles]).group_by_results[0].items
    assert [(i.key, i.value) for i in items] == [(0.0, 100)]


def test_histogram_refuses_more_than_2000_intervals(client: OTSClient) -> None:
    # Documented: (field_range.max - field_range.min) / interval cannot exceed 2000, whatever
    # min_doc_count asks for.
    wide = GroupByHistogram("l", 1, FieldRange(0, 2001), min_doc_count=1)
    with pytest.raises(OTSServiceError) as info:
        search(client, group_bys=[wide])
    assert (info.value.http_status, info.value.code) == (400, "OTSParameterInvalid")
    assert "2000" in info.value.message
