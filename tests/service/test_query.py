"""Queries: key prefix + range, paging to a null continuation key, derived keys, indexes, search."""

import pytest
from service_models import FAST, Account, Event, Reading, Tick
from tablestore import metadata as md

from tsmigrate.instance import rawclient
from tsmigrate.local import rows as local_rows
from tsmigrate.service import Attr, Exists, QueryError, Range, Rows, between
from tsmigrate.service.calls import stream
from tsmigrate.service.query import Query, range_op
from tsmigrate.wire import rows as wire


def _load(readings, device, count, **extra):
    readings.batch_write(put=(Reading(device_id=device, ts=i, battery=i % 100, **extra)
                              for i in range(count))).raise_for_failures()


def test_prefix_and_range_forward_backward_limit(readings):
    _load(readings, "a", 50)
    _load(readings, "b", 5)
    assert [r.ts for r in readings.query(device_id="a")] == list(range(50))
    assert [r.ts for r in readings.query(device_id="a", ts=Range(gte=10, lt=13))] == [10, 11, 12]
    assert [r.ts for r in readings.query(device_id="a", ts=Range(gt=10, lte=13))] == [11, 12, 13]
    assert [r.ts for r in readings.query(device_id="a", ts=between(10, 13), reverse=True)] == [
        13, 12, 11, 10]
    assert [r.ts for r in readings.query(device_id="a", ts=Range(gt=10, lt=13), reverse=True)] == [
        12, 11]
    assert [r.ts for r in readings.query(device_id="a", reverse=True, limit=3)] == [49, 48, 47]
    assert [r.ts for r in readings.query(device_id="a", ts=5)] == [5]
    # A hash-prefixed key still reads one device's rows, in time order.
    assert {r.device_id for r in readings.query(device_id="b")} == {"b"}


def test_columns_to_get_and_none_for_the_rest(readings):
    _load(readings, "a", 3, serial="S")
    [row, *_] = readings.query(device_id="a", columns=["battery"])
    assert row.battery == 0 and row.serial is None and row.ts == 0


class PageCounter:
    """A client that counts the rows of each GetRange page it answers."""

    def __init__(self, client):
        self.client = client
        self.pages = []

    def send_raw(self, step):
        answer = rawclient.send(self.client, step.api, step.body)
        if step.api == "GetRange":
            self.pages.append(len(wire.page(answer).rows))
        return answer

    def __getattr__(self, name):
        return getattr(self.client, name)


def test_filtered_query_returns_every_match_across_many_short_pages(readings, monkeypatch):
    # The server scans at most PAGE_ROWS rows per page when a filter is set (5,000, as the service
    # does: tests/local/test_server_rows.py), so the matches arrive over pages that are short or
    # empty and still carry a continuation key. Here 120 rows and 50 a page: the same pages as
    # 12,000 rows and 5,000 a page, without writing 12,000 rows through the SDK (4 s and more).
    monkeypatch.setattr(local_rows, "PAGE_ROWS", 50)
    readings.batch_write(put=(
        Reading(device_id="a", ts=i, battery=1 if i in (3, 4, 118) else 50)
        for i in range(120))).raise_for_failures()
    codec = readings.codec
    recording = PageCounter(readings.client)
    query = Query.build(codec, {"device_id": "a", "filter": Attr("battery") < 10})
    found = [r.ts for r in stream(recording, range_op(codec, query))]
    assert found == [3, 4, 118]
    calls = recording.pages
    assert len(calls) >= 3 and sum(calls) == 3  # several pages, short ones, the query went on
    # Through the public API too, and backward.
    assert [r.ts for r in readings.query(device_id="a", filter=Attr("battery") < 10,
                                         reverse=True)] == [118, 4, 3]


def test_page_size_forces_short_pages_without_losing_rows(readings):
    _load(readings, "a", 30)
    assert [r.ts for r in readings.query(device_id="a", page_size=4)] == list(range(30))
    assert [r.ts for r in readings.query(device_id="a", page_size=4, limit=9)] == list(range(9))


def test_results_stream_lazily(readings, monkeypatch):
    _load(readings, "a", 30)
    recording = PageCounter(readings.client)
    pages = recording.pages  # the rows of every GetRange answer, in the order asked for
    monkeypatch.setattr(readings, "client", recording)
    it = readings.query(device_id="a", page_size=10)
    assert pages == []  # nothing is read before the first row is asked for
    assert next(it).ts == 0
    assert pages == [10]  # one page read, not the whole range
    assert [next(it).ts for _ in range(9)] == list(range(1, 10))
    assert pages == [10]  # the rest of that page costs no request
    assert next(it).ts == 10
    assert pages == [10, 10]  # the next page, only once its first row is asked for
    assert [r.ts for r in it] == list(range(11, 30))
    assert sum(pages) == 30 and len(pages) >= 3


def test_bucketed_key_reads_every_bucket_and_merges_in_order(client):
    ticks = Rows(Tick, client, retry=FAST)
    ticks.batch_write(put=[Tick(ts=t, value=t * 10) for t in range(0, 40, 3)]).raise_for_failures()
    assert [t.ts for t in ticks.query()] == list(range(0, 40, 3))
    assert [t.ts for t in ticks.query(ts=Range(gte=6, lt=30))] == [6, 9, 12, 15, 18, 21, 24, 27]
    assert [t.ts for t in ticks.query(ts=Range(gte=6, lt=30), reverse=True, limit=3)] == [27, 24, 21]
    assert ticks.get(ts=9).value == 90


def test_descending_key_reads_in_the_fields_order(client):
    events = Rows(Event, client, retry=FAST)
    events.batch_write(put=[Event(device="d", ts=t, kind="k") for t in (5, 1, 9, 3)])
    assert [e.ts for e in events.query(device="d")] == [9, 5, 3, 1]  # newest first by key
    assert [e.ts for e in events.query(device="d", ts=Range(gte=2, lte=5))] == [3, 5]
    assert [e.ts for e in events.query(device="d", ts=Range(gte=2, lte=5), reverse=True)] == [5, 3]


def test_query_models_are_the_reads_models_whatever_columns_a_row_holds(client):
    # A row with every column of the model takes a fast path (service/rowmodels.py); one missing
    # a column, or holding a column the model does not declare, the general one. Either way a
    # query's model is the one get() reads.
    events = Rows(Event, client, retry=FAST)
    events.put(Event(device="d", ts=1, kind="a"))
    events.put(Event(device="d", ts=2))
    client.put_row(Event.table_name(),
                   md.Row(Event.key(device="d", ts=3), [("kind", "c"), ("legacy", 7), ("ts", 3)]),
                   md.Condition(md.RowExistenceExpectation.IGNORE))
    found = list(events.query(device="d"))
    assert [(e.ts, e.kind) for e in found] == [(3, "c"), (2, None), (1, "a")]
    assert "legacy" not in vars(found[0])
    assert found == [events.get(device="d", ts=ts) for ts in (3, 2, 1)]


def test_query_that_the_key_cannot_serve_is_a_clear_error(readings):
    with pytest.raises(QueryError, match="battery cannot narrow this query"):
        list(readings.query(device_id="a", battery=3))
    with pytest.raises(QueryError, match="no secondary index 'nope'"):
        list(readings.query(index="nope", serial="x"))


def test_a_misspelt_option_is_named_with_the_valid_options(readings):
    with pytest.raises(QueryError, match=r"Reading.query\(\): 'revers' is neither a field nor an "
                                         r"option \(did you mean 'reverse'\?\); options: reverse, limit"):
        list(readings.query(device_id="a", revers=True))
    with pytest.raises(QueryError, match=r"Reading.search\(\): 'sort_by' .*options: query, sort"):
        list(readings.search("finder", sort_by=["ts"]))
    with pytest.raises(QueryError, match=r"Reading.count\(\): 'limit' .*; options: query; fields: "):
        readings.count("finder", limit=3)


def test_global_index_returns_model_rows_and_fetches_missing_columns(readings):
    readings.batch_write(put=[
        Reading(device_id=f"d{i}", ts=i, serial="S1" if i % 2 else "S2", battery=i, temp_c=i / 2)
        for i in range(10)]).raise_for_failures()
    hits = list(readings.query(index="by_serial", serial="S1"))
    assert sorted(r.ts for r in hits) == [1, 3, 5, 7, 9]
    assert all(r.battery == r.ts and r.temp_c is None for r in hits)  # temp_c is not in the index
    full = list(readings.query(index="by_serial", serial="S1", fetch_missing=True))
    assert sorted((r.ts, r.temp_c, r.device_id) for r in full) == [
        (i, i / 2, f"d{i}") for i in (1, 3, 5, 7, 9)]


def test_local_index_with_range(readings):
    _load(readings, "a", 20)
    hits = list(readings.query(index="by_battery", device_id="a", battery=Range(gte=5, lt=8)))
    assert [r.battery for r in hits] == [5, 6, 7]


def test_search_index_queries_sorts_and_total(readings):
    readings.batch_write(put=[
        Reading(device_id=f"d{i}", ts=i, serial="S1" if i % 3 == 0 else "S2", battery=i)
        for i in range(250)]).raise_for_failures()
    found = list(readings.search("finder", serial="S1", battery=Range(lt=60), sort=["-battery"]))
    assert [r.battery for r in found] == sorted((i for i in range(60) if i % 3 == 0), reverse=True)
    assert readings.count("finder", serial="S1") == len(range(0, 250, 3))
    # More than one page of search results (100 per page), followed to the end.
    assert len(list(readings.search("finder", sort=["ts"]))) == 250
    assert [r.ts for r in readings.search("finder", sort=["ts"], limit=5)] == [0, 1, 2, 3, 4]
    assert readings.count("finder", battery=Exists()) == 250


def test_a_search_index_the_model_does_not_declare_is_a_query_error(readings):
    with pytest.raises(QueryError, match="Reading declares no search index 'findr'; search "
                                         "indexes: finder"):
        list(readings.search("findr", serial="S1"))
    with pytest.raises(QueryError, match="no search index 'findr'"):
        readings.count("findr")


def test_fetch_missing_reads_the_table_by_a_datetime_key(ots_instance):
    """The table key read back from an index row is a datetime: sent as epoch ms again."""
    from datetime import datetime, timedelta, timezone

    from tsmigrate import Column, GlobalIndex, Model, PrimaryKey
    from tsmigrate.service import create_tables

    class Visit(Model, table="svc_visits"):
        user = PrimaryKey(str)
        at = PrimaryKey(datetime)
        page = Column(str, defined=True)
        referrer = Column(str)
        by_page = GlobalIndex(keys=["page"])

    client = ots_instance.client()
    create_tables(client, [Visit])
    visits = Rows(Visit, client, retry=FAST)
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    for i in range(3):
        visits.put(Visit(user="ann", at=start + timedelta(minutes=i), page="/home", referrer=f"r{i}"))
    found = list(visits.query(index="by_page", page="/home", fetch_missing=True))
    assert [(v.at, v.referrer) for v in found] == [
        (start + timedelta(minutes=i), f"r{i}") for i in range(3)]


def test_ranges_no_key_meets_return_no_rows(readings, accounts):
    _load(readings, "a", 10)
    assert list(readings.query(device_id="a", ts=Range(gte=5, lt=5))) == []
    assert list(readings.query(device_id="a", ts=Range(gt=7, lt=3), reverse=True)) == []
    for user in "abcde":
        accounts.put(Account(user_id=user))
    assert list(accounts.query(user_id=Range(gte="e", lt="b"))) == []


def test_backward_string_bounds_on_the_last_key_column(accounts):
    for user in ("a", "b", "b\x00", "ba", "c"):
        accounts.put(Account(user_id=user))
    assert [a.user_id for a in accounts.query(user_id="b", reverse=True)] == ["b"]
    assert [a.user_id for a in accounts.query(user_id=Range(gte="b"), reverse=True)] == [
        "c", "ba", "b\x00", "b"]
    assert [a.user_id for a in accounts.query(user_id=Range(gt="a", lt="ba"), reverse=True,
                                              page_size=1)] == ["b\x00", "b"]


def test_a_filter_sees_its_column_when_columns_leave_it_out(readings):
    readings.batch_write(put=[Reading(device_id="a", ts=i, battery=i, temp_c=float(i))
                              for i in range(10)]).raise_for_failures()
    rows = list(readings.query(device_id="a", columns=["battery"], filter=Attr("temp_c") < 3))
    assert [(r.ts, r.battery, r.temp_c) for r in rows] == [(0, 0, None), (1, 1, None), (2, 2, None)]


def test_a_filter_on_a_key_column_is_a_query_error(readings):
    with pytest.raises(QueryError, match="filter on ts, but ts is a primary-key column"):
        readings.query(device_id="a", filter=Attr("ts") > 3)
    with pytest.raises(QueryError, match="filter= takes a condition"):
        readings.query(device_id="a", filter="ts > 3")
