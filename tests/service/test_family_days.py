"""Month families on days: 'YYYY-MM-DD' strings (the seeds' SERP snapshot key), the other ISO
forms, a declared strftime format, date fields and int days. Rows land in the month of their day,
queries across months come back in key order, expired months are archived and restored exactly,
and a value that is not a day of the family's kind is a typed error naming the format."""

from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest
from service_models import FAST
from tablestore import metadata as md

from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.instance.apply import ApplyOptions, apply
from tsmigrate.schema.families import Monthly
from tsmigrate.schema.model import compile_models
from tsmigrate.service import QueryError, Range, Rows, RowValueError, create_tables
from tsmigrate.service.restore import restore_archive

SEP = datetime(2026, 9, 15, tzinfo=timezone.utc)
MONTHS = ("202609", "202610", "202611")
DAYS = [date(2026, 9, 20) + timedelta(days=4 * i) for i in range(15)]  # Sep 20 .. Nov 15


def day_model(day_type: type, format: str | None = None, **family: Any) -> type[Model]:
    class Snapshot(Model, table="serp_snapshots", max_time_deviation="400d",
                   family=Monthly("day", ahead=2, format=format, **family)):
        keyword = PrimaryKey(str)
        day = PrimaryKey(day_type)
        n = PrimaryKey(int)
        rank = Column(int)

    return Snapshot


def month_rows(client: Any, table: str) -> list[tuple[Any, ...]]:
    """Every row of a month table as (primary key values, cells with timestamps), in key order."""
    start = [(n, md.INF_MIN) for n in ("keyword", "day", "n")]
    end = [(n, md.INF_MAX) for n in ("keyword", "day", "n")]
    _, _, rows, _ = client.get_range(table, md.Direction.FORWARD, start, end, None, None, None, 2)
    return [(tuple(v for _, v in r.primary_key), sorted(r.attribute_columns)) for r in rows]


@pytest.fixture
def serp(ots_instance, tmp_path):
    """The seeds' table as a family: keyed by keyword and a 'YYYY-MM-DD' day, three months kept."""
    model = day_model(str, retain=3, archive=str(tmp_path / "archive"))
    client = ots_instance.client()
    create_tables(client, [model], now=SEP)
    return Rows(model, client, retry=FAST)


def test_iso_days_route_query_across_months_retire_and_restore_exactly(serp, tmp_path):
    client = serp.client
    assert {f"serp_snapshots_{m}" for m in MONTHS} <= set(client.list_table())
    # Written newest first, for two keywords: the order comes from the month tables' merge.
    serp.batch_write(put=[serp.model(keyword=k, day=d.isoformat(), n=i, rank=i)
                          for i, d in reversed(list(enumerate(DAYS))) for k in ("serp api", "x")]
                     ).raise_for_failures()
    for month in MONTHS:
        days = [pk[1] for pk, _ in month_rows(client, f"serp_snapshots_{month}")]
        assert days and all(d.replace("-", "")[:6] == month for d in days)

    window = serp.query(keyword="serp api", day=Range(gte="2026-09-28", lte="2026-11-08"))
    got = [r.day for r in window]
    assert got == [d.isoformat() for d in DAYS if date(2026, 9, 28) <= d <= date(2026, 11, 8)]
    assert {d[:7] for d in got} == {"2026-09", "2026-10", "2026-11"}
    backward = [r.day for r in serp.query(keyword="x", day=Range(gte="2026-09", lt="2026-11"),
                                          reverse=True, limit=4)]
    assert backward == sorted((d.isoformat() for d in DAYS if d.month < 11), reverse=True)[:4]

    before = {m: month_rows(client, f"serp_snapshots_{m}") for m in MONTHS}
    january = datetime(2027, 1, 10, tzinfo=timezone.utc)  # retain=3: Nov, Dec, Jan
    apply(client, compile_models([serp.model]), ApplyOptions(allow_destructive=True), target_identity="t",
          now=january)
    assert not {"serp_snapshots_202609", "serp_snapshots_202610"} & set(client.list_table())
    for month in ("202609", "202610"):
        archive = tmp_path / "archive" / f"serp_snapshots_{month}.jsonl.gz"
        assert restore_archive(client, str(archive)).rows == len(before[month])
    assert {m: month_rows(client, f"serp_snapshots_{m}") for m in MONTHS} == before
    assert len(list(serp.query(keyword="serp api"))) == len(DAYS)  # queried again, every month


KINDS = [  # (the value of a day, the field's type, the family's format)
    pytest.param(lambda d: d.strftime("%Y%m%d"), str, None, id="YYYYMMDD"),
    pytest.param(lambda d: d.strftime("%Y-%m"), str, None, id="YYYY-MM"),
    pytest.param(lambda d: d.strftime("%Y/%m/%d"), str, "%Y/%m/%d", id="declared"),
    pytest.param(lambda d: int(d.strftime("%Y%m%d")), int, "%Y%m%d", id="int-days"),
    pytest.param(lambda d: d, date, None, id="date"),
]


@pytest.mark.parametrize(("make", "day_type", "format"), KINDS)
def test_every_kind_of_day_routes_and_queries_across_months(ots_instance, make, day_type, format):
    model = day_model(day_type, format)
    client = ots_instance.client()
    create_tables(client, [model], now=SEP)
    rows = Rows(model, client, retry=FAST)
    rows.batch_write(put=[model(keyword="k", day=make(d), n=i, rank=i)
                          for i, d in reversed(list(enumerate(DAYS)))]).raise_for_failures()
    stored = {make(d) if day_type is not date else d.isoformat(): d for d in DAYS}
    for month in MONTHS:
        in_table = {pk[1] for pk, _ in month_rows(client, f"serp_snapshots_{month}")}
        assert in_table == {s for s, d in stored.items() if d.strftime("%Y%m") == month}

    everything = [(r.day, r.n) for r in rows.query(keyword="k")]
    assert everything == sorted((make(d), i) for i, d in enumerate(DAYS))
    low, high = make(date(2026, 9, 28)), make(date(2026, 11, 8))
    window = [(r.day, r.n) for r in rows.query(keyword="k", day=Range(gte=low, lte=high))]
    assert window == [row for row in everything if low <= row[0] <= high]
    assert len({n // 4 for _, n in window}) >= 3  # rows of Sep, Oct and Nov


def test_a_day_first_format_routes_but_ranges_stay_within_a_month(ots_instance):
    model = day_model(str, "%d/%m/%Y")
    client = ots_instance.client()
    create_tables(client, [model], now=SEP)
    rows = Rows(model, client, retry=FAST)
    rows.batch_write(put=[model(keyword="k", day=d.strftime("%d/%m/%Y"), n=i, rank=i)
                          for i, d in enumerate(DAYS)]).raise_for_failures()
    assert [pk[1] for pk, _ in month_rows(client, "serp_snapshots_202610")] == [
        d.strftime("%d/%m/%Y") for d in DAYS if d.month == 10]
    # Across months the merge keeps key order (the strings' order), as one table would.
    assert [r.day for r in rows.query(keyword="k")] == sorted(d.strftime("%d/%m/%Y") for d in DAYS)
    october = rows.query(keyword="k", day=Range(gte="05/10/2026", lt="20/10/2026"))
    assert [r.day for r in october] == ["06/10/2026", "10/10/2026", "14/10/2026", "18/10/2026"]
    with pytest.raises(QueryError, match=r"serp_snapshots.day: strings in the format '%d/%m/%Y' "
                                         "do not sort by date"):
        list(rows.query(keyword="k", day=Range(gte="25/09/2026", lt="20/10/2026")))


def test_a_day_that_does_not_parse_names_the_format(ots_instance):
    client = ots_instance.client()
    iso = Rows(day_model(str), client, retry=FAST)
    with pytest.raises(RowValueError, match=r"Snapshot.day: '2026/09/21' is not a date as "
                                            r"'YYYY-MM-DD', 'YYYYMMDD' or 'YYYY-MM'; declare"):
        iso.put(iso.model(keyword="k", day="2026/09/21", n=1))
    with pytest.raises(RowValueError, match="'2026-02-30' is not a date as"):
        iso.get(keyword="k", day="2026-02-30", n=1)
    with pytest.raises(QueryError, match=r"serp_snapshots.day, a bound of the range: 'soon'"):
        list(iso.query(keyword="k", day=Range(gte="2026-09-01", lt="soon")))
    declared = Rows(day_model(str, "%d/%m/%Y"), client, retry=FAST)
    with pytest.raises(RowValueError, match=r"'2026-09-21' is not a date in the family's format "
                                            r"'%d/%m/%Y' \(such as '21/09/2026'\)"):
        declared.put(declared.model(keyword="k", day="2026-09-21", n=1))
    with pytest.raises(RowValueError, match="'1/9/2026' is not a date in the family's format"):
        declared.put(declared.model(keyword="k", day="1/9/2026", n=1))  # would not sort
    int_days = Rows(day_model(int, "%Y%m%d"), client, retry=FAST)
    with pytest.raises(RowValueError, match="'20261301' is not a date in the family's format"):
        int_days.put(int_days.model(keyword="k", day=20261301, n=1))


@pytest.mark.parametrize(("day_type", "format", "message"), [
    (float, None, "the family's field 'day' must be a date: a datetime, date, str"),
    (datetime, "%Y-%m-%d", "format= applies to str and int fields"),
    (date, "%Y-%m-%d", "format= applies to str and int fields"),
    (str, "%Y", "format '%Y' must hold the year (%Y) and the month (%m)"),
    (str, "%Y-%m-%Q", "format '%Y-%m-%Q' is not a strftime format"),
    (int, "%Y-%m-%d", "an int field's format must write digits only"),
])
def test_family_fields_and_formats_are_checked(day_type, format, message):
    _, problems = day_model(day_type, format).compile()
    assert message in " ".join(p.message for p in problems)
